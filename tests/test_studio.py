"""The inspecting handlers (app/studio.py) on the tiny pipeline: what a finished take sets, the
frame inspector, code surgery and restore, listening without a codebook, A/B, and the stateless
statistics and surgery APIs."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest

from app.files import OutputDir
from app.studio import AfterTake, Pinned, Studio, SurgeryOut
from app.take import Take

from .conftest import our_pipeline

SKIP = gr.skip()


def studio(tmp_path) -> Studio:
    return Studio(our_pipeline("tiny"), OutputDir(tmp_path))


def take(T: int = 6, seed: int = 0) -> Take:
    codes = np.random.default_rng(seed).integers(0, 2048, (T, 16))
    return Take.from_codes(codes, our_pipeline("tiny").decode(codes))


def test_after_a_take_statistics_spectrogram_slider_and_inspector(tmp_path):
    assert studio(tmp_path).after_take(None, None, "mel") == AfterTake()  # nothing to show: nothing changes
    out = studio(tmp_path).after_take(take(), None, "mel")
    assert "6 frames" in out.cbstats.layout.title.text and "log-mel" in out.spectrogram.layout.title.text
    assert out.frame.maximum == 5 and "frame 0" in out.frame_view and out.ab_plot == SKIP


def test_inspect_a_frame_and_its_audio_window(tmp_path):
    the_take = take()
    html, (sr, audio) = studio(tmp_path).inspect(2, the_take)
    assert "frame 2" in html and sr == 24000 and audio.dtype == np.int16
    assert len(audio) == min(len(the_take.audio_array()), 3 * 1920 + 12000) - max(0, 2 * 1920 - 12000)
    with pytest.raises(gr.Error, match="frame 6 is out of range"):
        studio(tmp_path).inspect(6, the_take)
    with pytest.raises(gr.Error, match="whole number"):
        studio(tmp_path).inspect("x", the_take)


def test_an_edit_is_heard_drawn_and_logged_and_restore_undoes_it(tmp_path):
    s, the_take = studio(tmp_path), take()
    original = the_take.codes_array().copy()
    out = s.edit("set", 3, 1, 2, 7, 0, the_take, "codes", "mel", 1)
    assert isinstance(out, SurgeryOut) and (the_take.edited_codes[1:3, 3] == 7).all()
    assert "2 edited cells" in out.heatmap.layout.title.text and "CB3 frames 1..2: set to 7" in out.edit_log
    assert "edited (was" in out.frame_view and len(out.edit_files) == 3
    np.testing.assert_array_equal(the_take.codes_array(), original)  # the original is kept
    s.edit("drop", 0, 0, None, None, None, the_take, "codes", "mel")
    assert len(the_take.edits) == 2 and the_take.drop[:, 0].all()
    last = the_take.frames - 1  # the page's "to frame" box starts at -1: the last frame
    out = s.edit("drop", 5, 2, -1, None, None, the_take, "codes", "mel")
    assert the_take.drop[2:, 5].all() and not the_take.drop[:2, 5].any() and f"CB5 frames 2..{last}" in out.edit_log
    back = s.restore(the_take, "codes", "mel")
    assert the_take.edited_codes is None and back.edit_audio is None and "original take" in back.edit_log
    with pytest.raises(gr.Error, match="codebook 16 is outside"):
        s.edit("drop", 16, 0, None, 0, 0, the_take, "codes", "mel")
    with pytest.raises(gr.Error, match="still being generated"):
        s.edit("drop", 0, 0, None, 0, 0, Take(codes=list(original)), "codes", "mel")


def test_listen_without_a_codebook(tmp_path):
    the_take = take()
    sr, without = studio(tmp_path).listen_without(15, the_take)
    want = our_pipeline("tiny").decode(the_take.codes_array(), num_codebooks=15)
    np.testing.assert_array_equal(without, (np.clip(want, -1, 1) * 32767).astype(np.int16))
    with pytest.raises(gr.Error, match="No take yet"):
        studio(tmp_path).listen_without(0, None)


def test_pin_a_then_the_next_take_is_compared_to_it(tmp_path):
    s, a = studio(tmp_path), take(seed=1)
    pinned, line, _, plot, _ = s.pin(a)
    assert isinstance(pinned, Pinned) and "pinned: 6 frames" in line and plot.layout.annotations
    out = s.after_take(take(seed=1), pinned, "mel")  # the same codes, the same length: a cell diff
    assert "0 of 96 codes differ" in out.ab_plot.layout.title.text and "agree in 100.0%" in out.ab_text
    out = s.after_take(take(T=4, seed=1), pinned, "mel")  # other lengths: statistics side by side, no diff
    assert "lengths differ" in out.ab_plot.layout.title.text and "different lengths" in out.ab_text
    assert {trace.name for trace in out.ab_plot.data} == {"A", "B"}


def test_stats_and_surgery_apis(tmp_path):
    s = studio(tmp_path)
    codes = [[g for g in range(16)] for _ in range(3)]
    stats = s.stats_api({"codes": codes}, {"probs": [[0.5] * 16] * 3})
    assert stats["frames"] == 3 and stats["repeat_rate"] == [1.0] * 16 and stats["mean_prob"] == [0.5] * 16
    with pytest.raises(gr.Error, match=r"probs must have the codes' shape \[3, 16\]"):
        s.stats_api(codes, [[0.5] * 16])
    with pytest.raises(gr.Error, match="codes must be a list of frames"):
        s.stats_api("nope")
    doc, wav = s.surgery_api(codes, "set", 2, 0, 0, 9)
    assert doc["changed"] == [[0, 2]] and doc["codes"][0][2] == 9 and doc["edit"] == "CB2 frame 0: set to 9"
    assert wav.endswith("edited.wav")
