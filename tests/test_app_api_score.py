"""The `score` API on a Qwen3-TTS model (a real `python app.py` server with OMNI_MODEL=tiny-tts, through
gradio_client): a codes file (.npy or .json, as the page's upload takes) and a request → every code's
log-probability, probability and top-k alternatives, equal to the library's `pipe.score` of the same codes;
bad input gets a message."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from omni_core import SpeechRequest

from .conftest import our_pipeline


@pytest.fixture(scope="module")
def client(tts_server) -> Client:
    return Client(tts_server, verbose=False)


def test_score_a_codes_file_equals_the_library(client, tmp_path):
    pipe = our_pipeline("tiny-tts")
    request = SpeechRequest("Hello there.", speaker="ryan", language="english", predictor="kv", max_frames=6)
    codes = pipe.generate(request).codes.copy()
    codes[2, 4] = 7  # an edit: not the take the engine would make
    np.save(tmp_path / "codes.npy", codes)
    got = client.predict(handle_file(str(tmp_path / "codes.npy")), "Hello there.", "speak", "ryan", "kv", False,
                         None, None, None, "english", "", 5, api_name="/score")
    want = pipe.score(codes, SpeechRequest("Hello there.", speaker="ryan", language="english", predictor="kv"))
    assert got["frames"] == 6 and got["k"] == 5 and got["codes"] == codes.tolist()
    np.testing.assert_array_equal(np.asarray(got["probs"], np.float32), want.probs)
    np.testing.assert_array_equal(np.asarray(got["logprobs"], np.float32), want.logprobs)
    np.testing.assert_array_equal(np.asarray(got["top_codes"]), want.top_codes)
    np.testing.assert_array_equal(np.asarray(got["top_probs"], np.float32), want.top_probs)
    assert got["mean_logprob"] == pytest.approx(want.mean_logprob, rel=1e-6)
    assert np.asarray(got["top_codes"]).shape == (6, 16, 5)
    # the same codes as a .json file ({"codes": ...}), 2 alternatives, the server's default speaker
    (tmp_path / "codes.json").write_text(json.dumps({"codes": codes.tolist()}))
    got = client.predict(handle_file(str(tmp_path / "codes.json")), "Hello there.", predictor="kv", k=2,
                         api_name="/score")
    want = pipe.score(codes, SpeechRequest("Hello there.", speaker=pipe.info["default_speaker"], predictor="kv"), k=2)
    np.testing.assert_array_equal(np.asarray(got["probs"], np.float32), want.probs)
    np.testing.assert_array_equal(np.asarray(got["top_codes"]), want.top_codes)


def test_bad_input_gets_a_message(client, tmp_path):
    np.save(tmp_path / "short.npy", np.zeros((3, 15), np.int64))
    np.save(tmp_path / "ok.npy", np.zeros((3, 16), np.int64))
    with pytest.raises(AppError, match="16"):
        client.predict(handle_file(str(tmp_path / "short.npy")), "Hi.", api_name="/score")
    with pytest.raises(AppError, match="text is empty"):
        client.predict(handle_file(str(tmp_path / "ok.npy")), "", api_name="/score")
    with pytest.raises(AppError, match="k must be"):
        client.predict(handle_file(str(tmp_path / "ok.npy")), "Hi.", k=0, api_name="/score")
    assert client.predict(handle_file(str(tmp_path / "ok.npy")), "Hi.", api_name="/score")["frames"] == 3
