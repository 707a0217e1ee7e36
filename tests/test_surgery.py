"""Code surgery (app/surgery.py): drop equals a zero embedding, dropping the tail equals the first
k codebooks, an edit changes exactly its cells, undo restores the bytes, bad edits get clear messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.surgery import Edit, apply, edited_cells

from .conftest import our_pipeline


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


def test_random_is_seeded_and_a_written_code_is_heard_again():
    codes = np.zeros((10, 16), np.int64)
    drop = np.zeros_like(codes, bool)
    edit = Edit("random", 4, 2, 6, seed=3).checked(10)
    first, _ = apply(codes, drop, edit)
    np.testing.assert_array_equal(first, apply(codes, drop, edit)[0])
    assert not np.array_equal(first, apply(codes, drop, Edit("random", 4, 2, 6, seed=4).checked(10))[0])
    _, dropped = apply(codes, drop, Edit("drop", 4).checked(10))
    _, heard = apply(codes, dropped, Edit("set", 4, 3, 3, value=1).checked(10))
    assert not heard[3, 4] and heard[[0, 1, 2, 4], 4].all()


def test_checked_fills_the_end_and_describe_says_what():
    edit = Edit("drop", 2).checked(30)
    assert (edit.start, edit.end) == (0, 29) and edit.describe() == "CB2 frames 0..29: dropped"
    assert Edit("set", 1, "4", 4.0, value="7").checked(30) == Edit("set", 1, 4, 4, 7, 0)  # whole numbers as text
    assert Edit("set", 1, 4, 4, value=7).checked(30).describe() == "CB1 frame 4: set to 7"
    assert "random codes (seed 5)" in Edit("random", 0, seed=5).checked(30).describe()
    with pytest.raises(ValueError, match="codebook 8 is outside 0..7"):
        Edit("drop", 8).checked(30, num_codebooks=8)
