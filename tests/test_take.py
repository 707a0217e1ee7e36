"""`Take` (app/take.py): one session's utterance, grown frame by frame, replaced by the Result,
with code surgery's edits beside the original codes; zero frames give empty arrays."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app import figures
from app.take import Take
from omni_core import Frame, Result, Stats


def frame(i: int, mismatch: bool = False) -> Frame:
    codes = np.full(16, i, np.int64)
    return Frame(i, codes, np.full(16, 0.5, np.float32), 1.0, 2.0, batch=i + 1,
                 mismatch=np.arange(16) == i if mismatch else None,
                 top_codes=np.tile(codes[:, None], (1, 5)), top_probs=np.full((16, 5), 0.2, np.float32))


def test_take_and_figures_with_zero_frames():
    take = Take()
    codes, probs, mismatch = take.arrays()
    assert codes.shape == (0, 16) and probs is None and mismatch is None
    assert take.audio_array().shape == (0,)
    for view in figures.VIEWS:
        fig = figures.heatmap(codes, probs, mismatch, view)
        assert isinstance(fig, go.Figure) and fig.layout.annotations  # the empty figure says why
        fig.to_json()


def test_frames_grow_the_arrays_and_the_last_batch_is_kept():
    take = Take()
    for i in range(3):
        take.add_frame(frame(i, mismatch=True))
    take.add_audio([0.5, 0.25])
    take.add_audio(np.ones(3))
    codes, probs, mismatch = take.arrays()
    assert take.frames == 3 and codes[:, 0].tolist() == [0, 1, 2] and probs.shape == (3, 16)
    assert mismatch.sum() == 3 and take.batch == 3
    assert take.audio_array().tolist() == [0.5, 0.25, 1, 1, 1] and take.audio_array().dtype == np.float32
    top, top_probs = take.alternatives()
    assert top.shape == (3, 16, 5) and top_probs.shape == (3, 16, 5)


def test_finish_replaces_the_streamed_pieces_with_the_result():
    take = Take()
    take.add_frame(frame(0))
    codes = np.arange(32).reshape(2, 16)
    result = Result(codes, np.zeros(5, np.float32), "said", [], [], Stats(), np.ones((2, 16), np.float32),
                    top_codes=np.zeros((2, 16, 5), np.int64), top_probs=np.zeros((2, 16, 5), np.float32))
    take.finish(result)
    assert take.finished and take.text == "said" and take.frames == 2
    np.testing.assert_array_equal(take.codes_array(), codes)
    assert take.audio_array().shape == (5,) and take.alternatives()[0].shape == (2, 16, 5)


def test_uploaded_codes_have_no_probabilities_or_alternatives():
    take = Take.from_codes(np.zeros((4, 16), np.int64), np.zeros(100, np.float32), view="confidence")
    codes, probs, mismatch = take.arrays()
    assert take.finished and take.view == "confidence" and codes.shape == (4, 16)
    assert probs is None and mismatch is None and take.alternatives() is None


def test_edits_are_heard_and_marked_and_the_original_kept():
    take = Take.from_codes(np.zeros((4, 16), np.int64), np.zeros(100, np.float32))
    assert take.edited_mask() is None and take.current_audio().shape == (100,)
    take.edited_codes = take.codes_array().copy()
    take.edited_codes[1, 2] = 5
    take.drop = np.zeros((4, 16), bool)
    take.drop[3, 0] = True
    take.edited_audio = np.ones(50, np.float32)
    assert np.argwhere(take.edited_mask()).tolist() == [[1, 2], [3, 0]]
    assert take.current_codes()[1, 2] == 5 and take.codes_array()[1, 2] == 0
    assert take.current_audio().shape == (50,) and take.arrays()[0][1, 2] == 5
