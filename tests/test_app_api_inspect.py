"""The inspecting endpoints through gradio_client against the real server: `codebook_stats`
and `surgery`, their bad values, and the heatmap payload a long streamed take sends."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client
from gradio_client.exceptions import AppError

from .test_app_api import synthesize


@pytest.fixture(scope="module")
def client(app_server) -> Client:
    return Client(app_server, verbose=False)


def test_codebook_stats_endpoint(client):
    codes = np.zeros((8, 16), int)
    codes[:, 1] = np.arange(8)
    stats = client.predict({"codes": codes.tolist()}, None, api_name="/codebook_stats")
    assert stats["frames"] == 8 and stats["utilization"][0] == 1 / 2048 and stats["entropy_bits"][1] == 3.0
    assert stats["repeat_rate"][0] == 1.0 and stats["repeat_rate"][1] == 0.0 and stats["mean_prob"][0] is None
    probs = np.full((8, 16), 0.25).tolist()
    assert client.predict(codes.tolist(), probs, api_name="/codebook_stats")["mean_prob"] == [0.25] * 16


def test_surgery_endpoint_drops_and_sets(client):
    result, _ = client.predict("Cut me.", max_frames=10, api_name="/codes")
    codes = np.array(result["codes"])
    edited, wav = client.predict({"codes": codes.tolist()}, "set", 3, 2, 4, 7, 0, api_name="/surgery")
    new = np.array(edited["codes"])
    assert sorted(map(tuple, np.argwhere(new != codes))) <= [(2, 3), (3, 3), (4, 3)] and (new[2:5, 3] == 7).all()
    dropped, wav = client.predict(codes.tolist(), "drop", 15, 0, None, 0, 0, api_name="/surgery")
    assert np.array(dropped["dropped"])[:, 15].all() and np.array(dropped["codes"]).tolist() == codes.tolist()
    audio, sr = sf.read(wav)
    assert sr == 24000 and len(audio) == len(codes) * 1920 - 555


@pytest.mark.parametrize("args, message", [
    (("set", 16, 0, None, 0, 0), "codebook 16 is outside 0..15"),
    (("set", 0, 0, None, 2048, 0), "code 2048 is outside 0..2047"),
    (("drop", 0, 12, None, 0, 0), "start frame 12 is out of range"),
    (("shuffle", 0, 0, None, 0, 0), "unknown edit"),
])
def test_surgery_bad_values(client, args, message):
    codes = np.zeros((5, 16), int).tolist()
    with pytest.raises(AppError, match=message):
        client.predict(codes, *args, api_name="/surgery")
    with pytest.raises(AppError, match="outside 0..2047"):
        client.predict([[5000] * 16], "drop", 0, 0, None, 0, 0, api_name="/surgery")


def test_a_long_take_sends_little_heatmap_payload(client):
    """600 frames (48 s) through `synthesize`: every heatmap update under 100 KB, all of them under 2 MB.
    Past LIVE_COLUMNS, so the live image is strided; a hover heatmap would be ~650 bytes a frame (390 KB)."""
    from app.figures import LIVE_COLUMNS

    frames = 600
    assert frames > LIVE_COLUMNS
    job = synthesize(client, "A long take to measure the payload.", max_frames=frames)
    sizes = [len(json.dumps(plot)) for _, plot, *_ in job if isinstance(plot, dict)]
    print(f"\nheatmap updates: {len(sizes)}, largest {max(sizes) / 1e3:.1f} KB, total {sum(sizes) / 1e6:.2f} MB")
    assert max(sizes) < 100_000 and sum(sizes) < 2_000_000
