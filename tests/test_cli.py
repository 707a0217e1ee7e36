"""`python -m omni_core synth` writes a 24 kHz WAV and the codes."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import soundfile as sf

from omni_core import SpeechRequest

from .conftest import our_pipeline


def test_synth_writes_wav_and_codes(tmp_path):
    wav, codes = tmp_path / "a.wav", tmp_path / "a.npy"
    done = subprocess.run([sys.executable, "-m", "omni_core", "synth", "Hello from the CLI", "--model", "tiny",
                           "--predictor", "kv", "--max-frames", "8", "--out", str(wav), "--codes", str(codes)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    audio, rate = sf.read(wav)
    assert rate == 24000 and len(audio) > 0
    got = np.load(codes)
    want = our_pipeline("tiny").generate(SpeechRequest("Hello from the CLI", predictor="kv", max_frames=8))
    np.testing.assert_array_equal(got, want.codes)


def test_synth_bad_input_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "omni_core", "synth", "   ", "--out", str(tmp_path / "x.wav")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "text is empty" in done.stderr and "Traceback" not in done.stderr
