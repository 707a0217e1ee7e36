"""app/roundtrip.py: the SNR and the log-mel distance of a re-decode against its original."""

from __future__ import annotations

import math

import numpy as np

from app.roundtrip import aligned, measures, mel_distance, snr_db

RATE = 24000


def tone(seconds: float = 1.0, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_an_exact_copy_has_infinite_snr_and_no_mel_distance():
    x = tone()
    assert math.isinf(snr_db(x, x)) and mel_distance(x, x, RATE) == 0.0
    assert measures(x, x, RATE) == {"snr_db": None, "mel_distance": 0.0}  # JSON has no infinity


def test_more_noise_means_lower_snr_and_a_larger_mel_distance():
    x, rng = tone(), np.random.default_rng(0)
    noise = rng.standard_normal(len(x)).astype(np.float32)
    quiet, loud = x + 0.003 * noise, x + 0.1 * noise
    assert snr_db(x, quiet) > 30 > snr_db(x, loud) > 0
    assert 0 < mel_distance(x, quiet, RATE) < mel_distance(x, loud, RATE)
    np.testing.assert_allclose(snr_db(x, x + 0.1 * x), 20.0, atol=1e-6)  # error 1/10 of the signal: 20 dB


def test_a_phase_shift_sounds_the_same_but_ruins_the_snr():
    x = tone()
    shifted = np.roll(x, 40)  # under 2 ms
    assert snr_db(x, shifted) < 3
    assert mel_distance(x, shifted, RATE) < 1.0


def test_the_longer_one_is_cut_to_the_common_length():
    x = tone(1.0)
    longer = np.concatenate([x, np.ones(1920, np.float32)])  # a re-decode runs to whole frames
    a, b = aligned(x, longer)
    assert len(a) == len(b) == len(x)
    assert math.isinf(snr_db(x, longer))
