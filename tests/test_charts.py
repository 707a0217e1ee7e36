"""The figures beside and under the heatmap (app/charts.py): codebook statistics (one bar per
codebook per panel), the spectrogram / waveform on the heatmap's time axis, the A/B diff."""

from __future__ import annotations

import numpy as np
import pytest

from app import charts, figures
from app.codestats import agreement, codebook_stats


def test_spectrogram_shares_the_heatmaps_time_axis():
    sr, T = 24000, 10
    audio = np.zeros(T * 1920 - 555, np.float32)
    audio[4 * 1920:5 * 1920] = np.sin(np.arange(1920) * 2 * np.pi * 1000 / sr)  # sound only in frame 4
    fig = charts.spectrogram(audio, sr, T, 80.0)
    heat = figures.heatmap(np.zeros((T, 16), np.int64))
    assert tuple(fig.layout.xaxis.range) == tuple(heat.layout.xaxis.range)
    image = fig.data[0]
    assert image.x0 == pytest.approx(480 / sr / 2) and image.dx == pytest.approx(480 / sr)


def test_waveform_kind_and_no_audio():
    audio = np.sin(np.arange(4800) / 10).astype(np.float32) * 0.5
    wave = charts.spectrogram(audio, 24000, 2, 80.0, kind="wave")
    high, low = wave.data[0], wave.data[1]
    assert "waveform" in wave.layout.title.text and len(high.x) == 10  # 4800 / 480 columns
    assert max(high.y) == pytest.approx(0.5, abs=1e-3) and min(low.y) == pytest.approx(-0.5, abs=1e-3)
    for audio in (None, np.zeros(0, np.float32)):
        empty = charts.spectrogram(audio, 24000, 0, 80.0)
        assert not empty.data and "spectrogram" in empty.layout.annotations[0].text


def test_cbstats_has_one_bar_per_codebook_in_four_panels():
    codes = np.zeros((3, 16), np.int64)
    codes[:, 1] = [1, 2, 3]
    fig = charts.cbstats(codebook_stats(codes))
    assert [t.name for t in fig.data] == ["used", "bits", "mean p", "repeat"]
    used, bits, mean_p, repeat = fig.data
    assert list(used.y) == [f"CB{g}" for g in range(16)] and used.x[1] == 3 / 2048
    assert bits.x[1] == pytest.approx(np.log2(3)) and np.isnan(mean_p.x).all()  # no probs: no bars
    assert repeat.x[0] == 1.0 and "3 frames" in fig.layout.title.text
    assert not charts.cbstats(None).data


def test_diff_marks_cells_that_differ_and_labels_agreement():
    a = np.zeros((5, 16), np.int64)
    b = np.zeros((4, 16), np.int64)
    b[0, 0] = 1
    differ, agree = agreement(a, b)
    fig = charts.diff(a, b, differ, agree, 80.0)
    assert "1 of 64 codes differ" in fig.layout.title.text and "(A 5, B 4 frames)" in fig.layout.title.text
    assert fig.layout.yaxis.ticktext[0] == "CB0 75%" and fig.layout.yaxis.ticktext[1] == "CB1 100%"
    none = charts.diff(a[:0], b, *agreement(a[:0], b), 80.0)
    assert not none.data and "no frames in common" in none.layout.annotations[0].text
