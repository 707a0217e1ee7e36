"""The heatmap figures (app/figures.py): codebooks as rows (CB0 on top), seconds on x, three views,
hover on short takes, a PNG grid on long takes and live updates (payload kept small), edited
cells outlined, and an empty figure whose message fits a phone."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from app import charts, figures
from app.codestats import codebook_stats


def sample(T: int = 5):
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 2048, size=(T, 16))
    probs = rng.random((T, 16)).astype(np.float32)
    return codes, probs, np.zeros((T, 16), bool)


def test_codes_heatmap_has_cb0_on_top_seconds_on_x_and_a_fixed_colour_range():
    codes, probs, _ = sample()
    fig = figures.heatmap(codes, probs, view="codes")
    trace = fig.data[0]
    assert trace.z.shape == (16, 5) and (trace.z[:, 2] == codes[2]).all()  # one row per codebook
    assert list(trace.y) == [f"CB{g}" for g in range(16)] and fig.layout.yaxis.autorange == "reversed"
    assert (trace.zmin, trace.zmax) == (0, 2047)
    assert (trace.x0, trace.dx) == (0.04, 0.08)  # frame centres, in seconds
    for word in ("frame", "t =", "%{y}", "code"):
        assert word in trace.hovertemplate
    assert "5 frames" in fig.layout.title.text


def test_confidence_and_disagreement_views():
    codes, probs, mismatch = sample()
    confidence = figures.heatmap(codes, probs, mismatch, view="confidence").data[0]
    assert (confidence.zmin, confidence.zmax) == (-4, 0)  # log10 p, decades 1e-4 .. 1
    np.testing.assert_allclose(confidence.z, np.log10(probs).T)
    agree = figures.heatmap(codes, probs, mismatch, view="disagreement")
    assert "nowhere" in agree.layout.title.text
    mismatch[1, 3] = True
    assert "in 1 of 80 codes" in figures.heatmap(codes, probs, mismatch, view="disagreement").layout.title.text
    not_compare = figures.heatmap(codes, probs, None, view="disagreement")
    assert "compare" in not_compare.layout.annotations[0].text


def test_confidence_is_drawn_on_a_log_scale_clipped_at_its_floor():
    codes, _, _ = sample()
    probs = np.full(codes.shape, 1e-3, np.float32)
    probs[0], probs[1] = 1.0, 1e-7  # certain, and below the floor
    heat = figures.heatmap(codes, probs, view="confidence").data[0].z.T
    assert heat[0].tolist() == [0] * 16 and heat[1].tolist() == [-4] * 16
    np.testing.assert_allclose(heat[2], -3, rtol=1e-6)
    # The PNG drawing (long or live takes): the same log scale as 256 levels
    np.testing.assert_allclose(figures.log_p(probs)[:3, 0], [0, -4, -3], rtol=1e-6)
    image = figures.heatmap(codes, probs, view="confidence", live=True)
    colorbar = image.data[-1].marker
    assert (colorbar.cmin, colorbar.cmax) == (-4, 0) and "log" in colorbar.colorbar.title.text


def test_confidence_without_probabilities_says_why_in_both_drawings():
    codes, _, _ = sample()
    for live in (False, True):
        fig = figures.heatmap(codes, None, view="confidence", live=live)
        assert not fig.data and fig.layout.annotations[0].text.startswith("No confidence for these codes")


def test_an_empty_figures_message_is_wrapped_to_fit_a_phone():
    message = "Pin a take, then make another: their differences show here"
    text = figures.empty(message).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) > 1 and " ".join(lines) == message
    assert all(len(line) <= figures.EMPTY_LINE_CHARS for line in lines)


def test_no_codes_is_the_empty_figure():
    for codes in (None, np.zeros((0, 16), np.int64)):
        fig = figures.heatmap(codes)
        assert not fig.data and "Press Generate" in fig.layout.annotations[0].text


@pytest.mark.parametrize("T", [60, 500, 1500])
def test_heatmap_payload_stays_small(T):
    rng = np.random.default_rng(T)
    codes, probs = rng.integers(0, 2048, (T, 16)), rng.random((T, 16)).astype(np.float32)
    live = len(figures.heatmap(codes, probs, live=True).to_json())
    final = len(figures.heatmap(codes, probs).to_json())
    audio = (rng.standard_normal(T * 1920) * 0.1).astype(np.float32)
    spectro = len(charts.spectrogram(audio, 24000, T, 80.0).to_json())
    stats = len(charts.cbstats(codebook_stats(codes, probs)).to_json())
    assert max(live, final, spectro, stats) < 100_000, (live, final, spectro, stats)
    assert live < 25_000  # ~135 live updates for a 1500-frame take stay under 2 MB together


def test_short_takes_keep_hover_and_edited_cells_are_outlined():
    codes = np.random.default_rng(0).integers(0, 2048, (20, 16))
    edited = np.zeros((20, 16), bool)
    edited[3:6, 2] = True
    edited[9, 2] = True
    fig = figures.heatmap(codes, edited=edited)
    assert fig.data[0].type == "heatmap" and "code" in fig.data[0].hovertemplate
    assert len(fig.layout.shapes) == 2 and "4 edited cells" in fig.layout.title.text
    long = figures.heatmap(np.random.default_rng(0).integers(0, 2048, (400, 16)))
    assert long.data[0].type == "image" and long.data[0].source.startswith("data:image/png;base64,")


def test_live_updates_are_strided_to_at_most_live_columns():
    T = 3 * figures.LIVE_COLUMNS + 1
    codes = np.random.default_rng(1).integers(0, 2048, (T, 16))
    fig = figures.heatmap(codes, live=True)
    image = fig.data[0]
    assert image.type == "image" and fig.layout.title.text.startswith("generating… ")
    assert image.dx == pytest.approx(4 * 0.08)  # every 4th frame: ceil(T / LIVE_COLUMNS) = 4
    assert tuple(fig.layout.xaxis.range) == pytest.approx((0, T * 0.08))


def test_png_uri_is_a_palette_image_of_the_levels():
    import base64
    import io

    from PIL import Image

    levels = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    uri = figures.png_uri(levels, figures.CODES_SCALE)
    image = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert image.mode == "P" and image.size == (4, 3)
    np.testing.assert_array_equal(np.asarray(image), levels)


def test_time_axis_is_at_least_one_second():
    fig = go.Figure()
    figures.time_axis(fig, 0.24)
    assert tuple(fig.layout.xaxis.range) == (0, 1.0)
    figures.time_axis(fig, 2.4)
    assert tuple(fig.layout.xaxis.range) == (0, 2.4)
