"""The app's output folder (app/files.py): one folder per request, old ones pruned; the WAV keeps
the engine's float samples; codes as .npy and .json; int16 for the players."""

from __future__ import annotations

import io
import json
import os
import time

import numpy as np
import soundfile as sf

from app.files import OutputDir, to_int16, wav_bytes, write_codes, write_wav


def test_each_request_gets_a_fresh_folder_and_old_ones_are_pruned(tmp_path):
    outputs = OutputDir(tmp_path, max_age_s=60)
    old = outputs.new()
    assert old.parent == tmp_path.resolve() and old.is_dir()
    stale = time.time() - 120
    os.utime(old, (stale, stale))
    new = outputs.new()
    assert new != old and new.is_dir() and not old.exists()


def test_wav_keeps_the_float_samples(tmp_path):
    audio = np.array([0.0, 0.123456789, -1.5, 2.0], np.float32)  # out of range too: nothing clipped
    path = write_wav(tmp_path, audio, 24000)
    back, sr = sf.read(path, dtype="float32")
    assert path.name == "speech.wav" and sr == 24000 and sf.info(path).subtype == "FLOAT"
    np.testing.assert_array_equal(back, audio)


def test_codes_files_hold_the_same_codes(tmp_path):
    codes = np.arange(32, dtype=np.int32).reshape(2, 16)
    npy, js = write_codes(tmp_path, codes, "hi", {"frames": 2})
    loaded = np.load(npy)
    assert loaded.dtype == np.int64 and (loaded == codes).all()
    doc = json.loads(js.read_text())
    assert doc == {"codes": codes.tolist(), "text": "hi", "stats": {"frames": 2}}


def test_int16_clips_to_the_players_range():
    assert to_int16(np.array([0.0, 0.5, 1.0, -1.0, 3.0, -3.0])).tolist() == [0, 16383, 32767, -32767, 32767, -32767]
    assert to_int16(np.zeros(2)).dtype == np.int16


def test_a_streamed_chunk_is_a_16_bit_wav_in_memory():
    audio = np.sin(np.linspace(0, 60, 1920)).astype(np.float32) * 1.2  # some of it past full scale: clipped
    data = wav_bytes(audio, 24000)
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert data[:4] == b"RIFF" and rate == 24000
    np.testing.assert_array_equal(samples, to_int16(audio))
