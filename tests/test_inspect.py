"""Inspecting codes without a server: codebook statistics (exact values), code surgery (drop
equals a zero embedding, an edit changes exactly its cells, undo restores the bytes), the
aligned spectrogram, the heatmap's payload at 60 / 500 / 1500 frames, the inspector."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from app import charts, figures, inspector, spectrum
from app.codestats import agreement, codebook_stats
from app.surgery import Edit, apply, edited_cells

from .conftest import our_pipeline


# ---- statistics -------------------------------------------------------------------------------

def test_constant_codebook_has_one_code_and_no_entropy():
    codes = np.zeros((50, 16), np.int64)
    codes[:, 3] = 7
    stats = codebook_stats(codes)
    assert stats["utilization"][3] == 1 / 2048 and stats["entropy_bits"][3] == 0.0
    assert stats["repeat_rate"][3] == 1.0 and stats["mean_prob"] == [None] * 16 and stats["frames"] == 50


def test_uniform_permutation_has_the_maximum():
    codes = np.stack([np.random.default_rng(g).permutation(2048) for g in range(16)], axis=1)  # [2048, 16]
    stats = codebook_stats(codes)
    assert stats["utilization"] == [1.0] * 16
    np.testing.assert_allclose(stats["entropy_bits"], 11.0, rtol=0, atol=1e-12)  # log2(2048)
    assert max(stats["repeat_rate"]) == 0.0


def test_hand_made_histogram_repeats_and_mean_probability():
    codes = np.zeros((4, 16), np.int64)
    codes[:, 0] = [5, 5, 9, 5]  # p = 3/4, 1/4
    probs = np.full((4, 16), 0.5, np.float32)
    probs[:, 0] = [0.1, 0.2, 0.3, 0.4]
    stats = codebook_stats(codes, probs)
    assert stats["utilization"][0] == 2 / 2048
    assert math.isclose(stats["entropy_bits"][0], -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)))
    assert stats["repeat_rate"][0] == 1 / 3 and stats["repeat_rate"][1] == 1.0
    assert math.isclose(stats["mean_prob"][0], 0.25, rel_tol=1e-6) and stats["mean_prob"][1] == 0.5
    one = codebook_stats(codes[:1])
    assert one["repeat_rate"] == [None] * 16 and one["entropy_bits"][0] == 0.0
    with pytest.raises(ValueError, match="no frames"):
        codebook_stats(np.zeros((0, 16), np.int64))


def test_agreement_over_common_frames():
    a = np.zeros((6, 16), np.int64)
    b = np.zeros((4, 16), np.int64)
    b[1, 2] = b[3, 2] = 1
    differ, agree = agreement(a, b)
    assert differ.shape == (4, 16) and differ.sum() == 2 and agree[2] == 0.5 and agree[0] == 1.0


# ---- surgery ----------------------------------------------------------------------------------

def codes_and_audio(T=10):
    pipe = our_pipeline("tiny")
    codes = np.random.default_rng(1).integers(0, 2048, (T, 16))
    return pipe, codes


def test_drop_equals_decoding_with_that_codebooks_embedding_zero():
    pipe, codes = codes_and_audio()
    edit = Edit("drop", 5).checked(len(codes))
    edited, drop = apply(codes, np.zeros_like(codes, bool), edit)
    assert (edited == codes).all() and drop[:, 5].all() and drop.sum() == len(codes)
    got = pipe.decode(edited, drop=drop)
    codec = pipe.code2wav
    x = torch.as_tensor(codes).T[None]  # [1, 16, T]
    offsets = torch.arange(16)[None, :, None] * codec.cfg.codebook_size
    emb = codec.code_embedding(x + offsets)  # [1, 16, T, C]
    emb[:, 5] = 0  # codebook 5 contributes nothing
    with torch.no_grad():
        original_embed = codec.embed
        codec.embed = lambda codes, k=None, keep=None: emb.sum(1) / 16
        try:
            want = codec(x)[0, 0].numpy()
        finally:
            codec.embed = original_embed
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert not np.allclose(got, pipe.decode(codes), atol=1e-4)  # it did change the sound


def test_dropping_the_tail_equals_first_k_codebooks():
    pipe, codes = codes_and_audio()
    drop = np.zeros_like(codes, bool)
    for g in range(4, 16):
        _, drop = apply(codes, drop, Edit("drop", g).checked(len(codes)))
    np.testing.assert_allclose(pipe.decode(codes, drop=drop), pipe.decode(codes, num_codebooks=4), rtol=0, atol=1e-6)


def test_an_edit_changes_exactly_its_cells_and_undo_restores_the_bytes():
    codes = np.random.default_rng(2).integers(0, 2048, (30, 16))
    before = codes.tobytes()
    drop = np.zeros_like(codes, bool)
    cell, _ = apply(codes, drop, Edit("set", 3, 7, 7, value=(codes[7, 3] + 1) % 2048).checked(30))
    assert np.argwhere(cell != codes).tolist() == [[7, 3]]
    span, span_drop = apply(codes, drop, Edit("random", 15, 10, 19, seed=4).checked(30))
    changed = edited_cells(codes, span, span_drop)
    assert set(map(tuple, np.argwhere(changed))) <= {(t, 15) for t in range(10, 20)} and changed.sum() >= 9
    whole, _ = apply(codes, drop, Edit("set", 0, value=0).checked(30))
    assert (whole[:, 0] == 0).all() and (whole[:, 1:] == codes[:, 1:]).all()
    assert codes.tobytes() == before  # the original is never written: undo is dropping the edited copy


@pytest.mark.parametrize("edit, message", [
    (Edit("drop", 16), "codebook 16 is outside 0..15"),
    (Edit("drop", -1), "outside 0..15"),
    (Edit("set", 0, value=2048), "code 2048 is outside 0..2047"),
    (Edit("set", 0, 0, 40), "end frame 40 is out of range: this take has frames 0..29"),
    (Edit("drop", 0, 31), "start frame 31 is out of range"),
    (Edit("drop", 0, 9, 3), "before start frame"),
    (Edit("blur", 0), "unknown edit"),
    (Edit("set", 0, value=1.5), "whole number"),
])
def test_bad_edits_get_clear_messages(edit, message):
    with pytest.raises(ValueError, match=message):
        edit.checked(30)


def test_an_edit_with_no_take():
    with pytest.raises(ValueError, match="no take to edit"):
        Edit("drop", 0).checked(0)


# ---- spectrogram and the shared time axis -----------------------------------------------------

def test_spectrogram_columns_sit_under_their_frames():
    sr, T = 24000, 10
    audio = np.zeros(T * 1920 - 555, np.float32)
    audio[4 * 1920:5 * 1920] = np.sin(np.arange(1920) * 2 * np.pi * 1000 / sr)  # sound only in frame 4
    mel = spectrum.log_mel(audio, sr)
    energy = mel.max(0)
    loud = np.flatnonzero(energy > energy.max() - 20)
    assert mel.shape[0] == 64 and loud.min() >= 4 * 4 - 1 and loud.max() <= 5 * 4  # 4 columns per frame
    fig = charts.spectrogram(audio, sr, T, 80.0)
    heat = figures.heatmap(np.zeros((T, 16), np.int64))
    assert tuple(fig.layout.xaxis.range) == tuple(heat.layout.xaxis.range)
    image = fig.data[0]
    assert image.x0 == pytest.approx(480 / sr / 2) and image.dx == pytest.approx(480 / sr)


def test_long_takes_use_a_coarser_hop_that_stays_frame_aligned():
    hop = spectrum.hop_for(1500 * 1920)
    assert 1500 * 1920 / hop <= spectrum.MAX_COLUMNS and (1920 % hop == 0 or hop % 1920 == 0)


# ---- payload: what a live update and a finished take send ---------------------------------------

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


# ---- the inspector -------------------------------------------------------------------------------

def test_inspector_shows_the_frame_codes_and_alternatives():
    result = our_pipeline("tiny").generate(__import__("omni_core").SpeechRequest("Inspect me.", max_frames=4))
    html = inspector.frame_html(2, 0.08, result.codes[2], result.probs[2], result.top_codes[2], result.top_probs[2])
    assert "frame 2" in html and "0.16–0.24 s" in html and html.count("<tr>") == 17  # header + 16 codebooks
    assert html.count('class="alt chosen"') == 16  # greedy: every chosen code is among (first in) its top 5
    assert str(result.top_codes[2, 7, 3]) in html
    window = inspector.context_window(0, 100_000, 1920, 24000)
    assert (window.start, window.stop) == (0, 1920 + 12000)
    window = inspector.context_window(20, 100_000, 1920, 24000)
    assert (window.start, window.stop) == (20 * 1920 - 12000, 21 * 1920 + 12000)
    json.dumps(codebook_stats(result.codes, result.probs))  # the API returns it as JSON
