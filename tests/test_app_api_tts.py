"""The API on a Qwen3-TTS model (a real `python app.py` server with OMNI_MODEL=tiny-tts, through
gradio_client): `codes` with a speaker and a language equals the library's codes, `encode` turns a
WAV into the library's codes with the round trip's measures, and bad input gets a message while
the server keeps serving."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from omni_core import SpeechRequest

from .conftest import our_pipeline


@pytest.fixture(scope="module")
def client(tts_server) -> Client:
    return Client(tts_server, verbose=False)


def wav_file(path, seconds: float = 0.6, rate: int = 24000):
    t = np.arange(int(rate * seconds)) / rate
    samples = (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    sf.write(path, samples, rate, subtype="PCM_16")
    return path


def test_codes_with_a_speaker_and_a_language_equal_the_library(client):
    result, wav = client.predict("Hello there.", "speak", "ryan", "kv", False, 0, 6, "english", "",
                                 api_name="/codes")
    want = our_pipeline("tiny-tts").generate(SpeechRequest("Hello there.", speaker="ryan", language="english",
                                                           predictor="kv", max_frames=6))
    np.testing.assert_array_equal(np.asarray(result["codes"]), want.codes)
    assert sf.info(wav).samplerate == 24000


def test_encode_returns_the_librarys_codes_and_the_round_trip(client, tmp_path):
    path = wav_file(tmp_path / "clip.wav")
    result, wav = client.predict(handle_file(str(path)), api_name="/encode")
    samples, rate = sf.read(path, dtype="int16")
    want = our_pipeline("tiny-tts").encode(samples, rate)
    np.testing.assert_array_equal(np.asarray(result["codes"]), want)
    assert isinstance(result["mel_distance"], float) and "snr_db" in result
    assert sf.info(wav).frames == len(want) * 1920


def test_bad_input_gets_a_message_and_the_server_keeps_serving(client, tmp_path):
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(24000, np.float32), 24000)
    with pytest.raises(AppError, match="silent"):
        client.predict(handle_file(str(silent)), api_name="/encode")
    with pytest.raises(AppError, match="instruct"):  # a 0.6B CustomVoice model takes no instruction
        client.predict("Hi.", "speak", "ryan", "kv", False, 0, 4, "", "whisper it", api_name="/codes")
    with pytest.raises(AppError, match="language"):
        client.predict("Hi.", "speak", "ryan", "kv", False, 0, 4, "klingon", "", api_name="/codes")
    result, _ = client.predict("Still here.", "speak", "vivian", "kv", False, 0, 4, "", "", api_name="/codes")
    assert np.asarray(result["codes"]).shape == (4, 16)
    json.dumps(result)
