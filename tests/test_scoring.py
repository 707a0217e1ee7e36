"""A score for any take (app/scoring.py) on the tiny pipeline: an uploaded take, not generated, is scored
with the page's settings and then has the confidence view, the inspector's probabilities and alternatives,
all equal to `pipe.score`'s; an edit of a scored (or generated) take is scored under the same request and
the edit log gives each edited cell's p before → after; the `score` API's JSON is `pipe.score`'s."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import pytest

from app import inspector, scoring
from app.files import OutputDir
from app.handlers import Lab
from app.scoring import Scorer, ScoreOut
from app.studio import Studio
from app.take import Take
from omni_core import SpeechRequest

from .conftest import our_pipeline

TEXT = "Score me, please."
# the page's settings, in the order the page passes them: text, mode, speaker, predictor, cuda_graph,
# do_sample, temperature, top_k, top_p, seed, max_frames, view, language, instruct, text_input, ref audio, ref text
SETTINGS = (TEXT, "speak", None, "kv", False, False, 0.9, 50, 1.0, 0, 0, "confidence", None, None, None, None, None)


def scorer(tmp_path) -> tuple[Scorer, Studio]:
    pipe = our_pipeline("tiny")
    lab, studio = Lab(pipe, OutputDir(tmp_path), streaming=True), Studio(pipe, OutputDir(tmp_path))
    return Scorer(pipe, lab, studio), studio


def uploaded(T: int = 6) -> Take:
    codes = np.random.default_rng(3).integers(0, 2048, (T, 16))
    return Take.from_codes(codes, our_pipeline("tiny").decode(codes), view="confidence")


def last(gen):
    *steps, out = list(gen)
    return steps, out


def test_an_uploaded_take_is_scored_as_pipe_score_scores_it(tmp_path):
    s, studio = scorer(tmp_path)
    take = uploaded()
    assert "Not scored" in scoring.status(take) and take.arrays()[1] is None
    steps, out = last(s.score_take(take, 2, *SETTINGS))
    assert "Scoring 6 frames" in steps[0].score_status and isinstance(out, ScoreOut)
    want = our_pipeline("tiny").score(take.codes_array(), SpeechRequest(TEXT, predictor="kv"))
    np.testing.assert_array_equal(take.arrays()[1], want.probs)
    top, top_probs = take.alternatives()
    np.testing.assert_array_equal(top, want.top_codes)
    np.testing.assert_array_equal(top_probs, want.top_probs)
    assert "confidence p(code)" in out.heatmap.layout.title.text and "Scored 6 frames" in out.score_status
    assert "“Score me, please.” said" in out.score_status
    assert "top-5 alternatives" in out.frame_view
    assert f'<td class="p">{inspector._p(want.probs[2, 0])}<' in out.frame_view
    assert out.frame_view.count('<span class="alt') == 16 * 5


def test_an_edit_is_scored_and_logged_with_p_before_and_after(tmp_path):
    s, studio = scorer(tmp_path)
    pipe = our_pipeline("tiny")
    request = SpeechRequest(TEXT, predictor="kv", max_frames=6)
    result = pipe.generate(request)
    take = Take(view="codes", request=request)
    take.finish(result)
    assert "the engine's" in scoring.status(take)
    value = int(result.top_codes[3, 2, -1])  # the 5th most probable code there
    out = studio.edit("set", 2, 3, 3, value, 0, take, "codes", "mel", 3)
    assert "Scoring the edited take" in out.edit_log and take.arrays()[1] is None  # heard first, scored next
    _, out = last(s.score_edit(take, "codes", 3))
    want = pipe.score(take.edited_codes, request)
    np.testing.assert_array_equal(take.arrays()[1], want.probs)
    before, after = result.probs[3, 2], want.probs[3, 2]
    assert after == result.top_probs[3, 2, -1]  # the same prefix: the original's 5th alternative
    assert f"CB2 frame 3: {result.codes[3, 2]} → {value}, p {before:.2g} → {after:.2g}" in out.edit_log
    assert "mean log-probability per code" in out.edit_log
    # the inspector's alternatives are the edited take's, its codes highlighted where among them (CB0..CB2 at
    # least: the same prefix; after the edit the greedy originals need not be the edited context's top 5)
    assert "edited (was" in out.frame_view and f'<span class="alt chosen" title="p = {after:.4f}">{value}<' in \
        out.frame_view and 3 <= out.frame_view.count('class="alt chosen"') <= 16
    # a drop keeps the codes and so the scores; restore goes back to the generated probabilities
    out = studio.edit("drop", 5, 0, None, 0, 0, take, "codes", "mel", 3)
    assert "codes unchanged" in out.edit_log and take.edited_probs is not None
    assert list(s.score_edit(take, "codes", 3)) == [ScoreOut()]  # nothing new to score
    studio.restore(take, "codes", "mel")
    np.testing.assert_array_equal(take.arrays()[1], result.probs)


def test_an_edit_of_an_unscored_take_says_how_to_see_its_probabilities(tmp_path):
    s, studio = scorer(tmp_path)
    take = uploaded()
    out = studio.edit("set", 1, 0, 1, 9, 0, take, "confidence", "mel")
    assert "Press Score this take" in out.edit_log and "p " not in out.edit_log.split("<ol>")[1].split("</ol>")[0]
    assert list(s.score_edit(take, "confidence", 0)) == [ScoreOut()]
    _, out = last(s.score_take(take, 0, *SETTINGS))  # scores the original and the edit
    assert ", p " in out.edit_log and take.edited_probs is not None


def test_bad_requests_and_no_take_get_messages(tmp_path):
    s, _ = scorer(tmp_path)
    with pytest.raises(gr.Error, match="No take yet"):
        list(s.score_take(None, 0, *SETTINGS))
    with pytest.raises(gr.Error, match="text is empty"):
        list(s.score_take(uploaded(), 0, "", *SETTINGS[1:]))


def test_score_api_is_pipe_score_as_json(tmp_path):
    s, _ = scorer(tmp_path)
    codes = np.random.default_rng(5).integers(0, 2048, (4, 16))
    np.save(tmp_path / "c.npy", codes)
    got = s.score_api(str(tmp_path / "c.npy"), TEXT, "speak", "", "kv", False, None, None, None, "", "", 3)
    json.dumps(got, allow_nan=False)
    want = our_pipeline("tiny").score(codes, SpeechRequest(TEXT, predictor="kv"), k=3)
    assert got["frames"] == 4 and got["k"] == 3 and got["codes"] == codes.tolist()
    np.testing.assert_array_equal(np.asarray(got["probs"], np.float32), want.probs)
    np.testing.assert_array_equal(np.asarray(got["top_codes"]), want.top_codes)
    np.testing.assert_array_equal(np.asarray(got["top_probs"], np.float32), want.top_probs)
    np.testing.assert_array_equal(np.asarray(got["logprobs"], np.float32), want.logprobs)
    with pytest.raises(gr.Error, match="codes file"):
        s.score_api(None, TEXT)
