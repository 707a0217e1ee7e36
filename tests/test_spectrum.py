"""The take's audio as columns on the heatmap's time axis (app/spectrum.py): 4 log-mel columns per
80 ms frame, a coarser frame-aligned hop for long takes, the waveform envelope, the mel filters."""

from __future__ import annotations

import numpy as np

from app import spectrum


def test_spectrogram_columns_sit_under_their_frames():
    sr, T = 24000, 10
    audio = np.zeros(T * 1920 - 555, np.float32)
    audio[4 * 1920:5 * 1920] = np.sin(np.arange(1920) * 2 * np.pi * 1000 / sr)  # sound only in frame 4
    mel = spectrum.log_mel(audio, sr)
    energy = mel.max(0)
    loud = np.flatnonzero(energy > energy.max() - 20)
    assert mel.shape[0] == 64 and loud.min() >= 4 * 4 - 1 and loud.max() <= 5 * 4  # 4 columns per frame


def test_long_takes_use_a_coarser_hop_that_stays_frame_aligned():
    hop = spectrum.hop_for(1500 * 1920)
    assert 1500 * 1920 / hop <= spectrum.MAX_COLUMNS and (1920 % hop == 0 or hop % 1920 == 0)


def test_short_takes_keep_the_base_hop_and_hops_step_through_frame_multiples():
    assert spectrum.hop_for(100 * 1920) == spectrum.BASE_HOP  # 400 columns
    assert spectrum.hop_for(1000 * 480 + 1) == 960  # just over MAX_COLUMNS: doubled
    assert spectrum.hop_for(10_000 * 1920) == 10 * 1920  # past a frame: whole frames (1000 columns)
    assert spectrum.hop_for(10_000 * 1920 + 1) == 11 * 1920


def test_column_count_and_a_tone_lands_in_its_mel_band():
    sr = 24000
    assert spectrum.log_mel(np.zeros(0, np.float32), sr).shape == (64, 0)
    assert spectrum.log_mel(np.zeros(481, np.float32), sr).shape == (64, 2)  # ceil(481 / 480)
    t = np.arange(sr) / sr
    low = spectrum.log_mel(np.sin(2 * np.pi * 300 * t), sr).mean(1).argmax()
    high = spectrum.log_mel(np.sin(2 * np.pi * 6000 * t), sr).mean(1).argmax()
    assert low < high  # low frequencies first


def test_mel_filters_are_triangles_covering_the_band():
    filters = spectrum.mel_filters(24000, 1024, 64)
    assert filters.shape == (64, 513) and filters.min() >= 0 and filters.max() <= 1
    peaks = filters.argmax(1)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > peaks[0]


def test_envelope_is_min_and_max_per_column():
    audio = np.array([0.1, -0.5, 0.3, 0.9, -0.2], np.float32)
    low, high = spectrum.envelope(audio, 2)
    np.testing.assert_allclose(low, [-0.5, 0.3, -0.2])
    np.testing.assert_allclose(high, [0.1, 0.9, 0.0])  # the last column is padded with zeros
