"""app/recording.py on tiny-tts (its codec has an encoder): a clip becomes the current take, with the
round trip's measures and the per-codebook ablation; a model without an encoder, no clip, or a clip that
is not usable get a message."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest

from app.files import OutputDir
from app.handlers import Lab
from app.recording import EncodeOut, Recording
from app.roundtrip import mel_distance

from .conftest import our_pipeline

RATE = 24000


def clip(seconds: float = 0.5, rate: int = RATE) -> tuple[int, np.ndarray]:
    t = np.arange(int(rate * seconds)) / rate
    return rate, (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)  # what gr.Audio hands over


def recording(tmp_path, source: str = "tiny-tts") -> Recording:
    pipe = our_pipeline(source)
    outputs = OutputDir(tmp_path)
    return Recording(pipe, outputs, Lab(pipe, outputs, streaming=True).figure)


def test_a_clip_becomes_the_take_with_its_round_trip_and_ablation(tmp_path):
    rec, pipe = recording(tmp_path), our_pipeline("tiny-tts")
    out = rec.encode(clip(0.5), "codes")
    assert isinstance(out, EncodeOut)
    codes = pipe.encode(clip(0.5)[1], RATE)
    assert out.take.frames == len(codes) == 7  # ceil(0.5 s · 12.5)
    np.testing.assert_array_equal(out.take.codes_array(), codes)
    assert "log-mel distance" in out.roundtrip and "SNR" in out.roundtrip
    (bars,) = out.ablation.data
    assert list(bars.x) == [f"CB{g}" for g in range(16)]
    original = pipe.prepare_audio(*clip(0.5)[::-1])
    drop = np.zeros(codes.shape, bool)
    drop[:, 3] = True
    full = mel_distance(original, pipe.decode(codes), RATE)
    assert bars.y[3] == pytest.approx(mel_distance(original, pipe.decode(codes, drop=drop), RATE) - full)
    rate, redecoded = out.audio_redecoded
    assert rate == RATE and len(redecoded) == 7 * 1920
    assert [p.rsplit("/", 1)[-1] for p in out.files] == ["redecoded.wav", "codes.npy", "codes.json"]


def test_the_encode_api_returns_codes_measures_and_a_wav(tmp_path):
    result, wav = recording(tmp_path).encode_api(clip(0.3, rate=16000))  # another rate: resampled
    assert np.asarray(result["codes"]).shape == (4, 16) and set(result) == {"codes", "snr_db", "mel_distance"}
    assert isinstance(result["mel_distance"], float) and wav.endswith(".wav")


@pytest.mark.parametrize("audio, message", [
    (None, "Record or upload a clip first"),
    ((RATE, np.zeros(RATE, np.int16)), "silent"),
    ((RATE, np.ones(RATE * 61, np.float32) * 0.1), "60"),
])
def test_no_clip_or_an_unusable_one_gets_a_message(tmp_path, audio, message):
    with pytest.raises(gr.Error, match=message):
        recording(tmp_path).encode(audio, "codes")


def test_a_model_without_an_encoder_says_so(tmp_path):
    rec = recording(tmp_path, "tiny")
    assert not rec.available()
    with pytest.raises(gr.Error, match="no encoder"):
        rec.encode(clip(), "codes")
