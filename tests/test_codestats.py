"""Codebook statistics and the agreement of two takes (app/codestats.py), with exact values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.codestats import agreement, codebook_stats


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


def test_other_codebook_sizes_and_shapes():
    codes = np.array([[0, 1], [2, 1]])
    stats = codebook_stats(codes, codebook_size=4)
    assert stats["codebook_size"] == 4 and stats["utilization"] == [0.5, 0.25]
    assert codebook_stats(codes, probs=np.ones((3, 2)))["mean_prob"] == [None, None]  # probs of other frames
    with pytest.raises(ValueError, match=r"shape \[frames, codebooks\]"):
        codebook_stats(np.zeros(16, np.int64))


def test_agreement_over_common_frames():
    a = np.zeros((6, 16), np.int64)
    b = np.zeros((4, 16), np.int64)
    b[1, 2] = b[3, 2] = 1
    differ, agree = agreement(a, b)
    assert differ.shape == (4, 16) and differ.sum() == 2 and agree[2] == 0.5 and agree[0] == 1.0


def test_no_common_frames_agree_nowhere_known():
    differ, agree = agreement(np.zeros((0, 16), np.int64), np.zeros((3, 16), np.int64))
    assert differ.shape == (0, 16) and agree.shape == (16,) and np.isnan(agree).all()
