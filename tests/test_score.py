"""`Pipeline.score(codes, request)`: teacher-forced, each given code's probability and its top-k alternatives
equal, bit for bit, what the engine reported while generating the same take (default mode), for every
predictor, speak and chat, greedy and sampled, both families; a take made beside others too."""

from __future__ import annotations

import numpy as np
import pytest

from omni_core import RequestError, SpeechRequest

from .conftest import our_pipeline
from .tts_oracle import our_tts

OMNI = [SpeechRequest("Score this take.", max_frames=6, predictor="kv"),
        SpeechRequest("Score this take.", max_frames=5, predictor="compare"),
        SpeechRequest("Chat, then score.", mode="chat", max_frames=5, max_text_tokens=6),
        SpeechRequest("Sampled take.", max_frames=5, do_sample=True, seed=4, temperature=0.8, top_k=40, top_p=0.9)]


def assert_scores_are_the_reports(score, result):
    np.testing.assert_array_equal(score.codes, result.codes)
    np.testing.assert_array_equal(score.probs, result.probs)
    np.testing.assert_array_equal(score.top_codes, result.top_codes)
    np.testing.assert_array_equal(score.top_probs, result.top_probs)
    np.testing.assert_array_equal(score.logprobs, np.log(result.probs))
    assert score.prompt_ids == result.prompt_ids and score.text_ids == result.text_ids


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("request_", OMNI, ids=["kv", "compare", "chat", "sampled"])
def test_score_equals_what_the_engine_reported(request_, dtype):
    pipe = our_pipeline("tiny", dtype)
    result = pipe.generate(request_)
    assert_scores_are_the_reports(pipe.score(result.codes, request_), result)


def test_takes_made_together_score_as_they_were_reported():
    pipe = our_pipeline("tiny-b")
    results = [s for s in pipe.stream_together(OMNI)]
    from .test_engine import collect
    for request, result in zip(OMNI, [collect(s) for s in results]):
        assert result.stats.batch_max > 1
        assert_scores_are_the_reports(pipe.score(result.codes, request), result)


@pytest.mark.parametrize("kind, request_", [
    ("custom_voice", SpeechRequest("Hello world, a test.", speaker="vivian", language="English", max_frames=6)),
    ("custom_voice", SpeechRequest("Streaming text", speaker="ryan", text_input="streaming", max_frames=5,
                                   predictor="kv", do_sample=True, seed=2)),
])
def test_qwen3_tts_scores_equal_the_reports(kind, request_):
    pipe = our_tts(kind, exact=False)
    result = pipe.generate(request_)
    assert_scores_are_the_reports(pipe.score(result.codes, request_), result)


def test_an_edit_is_scored_and_bad_codes_are_refused():
    pipe = our_pipeline("tiny")
    request = SpeechRequest("Edit me.", max_frames=4)
    result = pipe.generate(request)
    edited = result.codes.copy()
    edited[2, 3] = int(result.top_codes[2, 3, -1])  # the 5th most probable code there
    score = pipe.score(edited, request, k=3)
    assert score.top_codes.shape == (4, 16, 3)
    np.testing.assert_array_equal(score.probs[:2], result.probs[:2])  # before the edit: unchanged
    assert score.probs[2, 3] == result.top_probs[2, 3, -1] < result.probs[2, 3]
    assert score.mean_logprob < pipe.score(result.codes, request).mean_logprob
    assert pipe.score(result.codes[:0], request).probs.shape == (0, 16)
    for bad in (result.codes[:, :15], result.codes.astype(float), result.codes + 5000, -result.codes - 1):
        with pytest.raises(RequestError):
            pipe.score(bad, request)


def test_kept_distributions_hold_every_score():
    """score(..., keep=True): each cell's whole distribution sums to 1, gives the given code its probability and
    its top-k their order; a codebook with a smaller vocabulary than CB0's is padded with zeros."""
    pipe = our_pipeline("tiny")
    request = SpeechRequest("Keep them.", max_frames=3, predictor="kv")
    result = pipe.generate(request)
    score = pipe.score(result.codes, request, keep=True)
    dists = score.distributions
    assert dists.shape[:2] == (3, 16) and dists.dtype == np.float32
    np.testing.assert_allclose(dists.sum(-1), 1, rtol=1e-4)
    np.testing.assert_array_equal(np.take_along_axis(dists, score.codes[..., None], -1)[..., 0], score.probs)
    np.testing.assert_array_equal(np.take_along_axis(dists, score.top_codes, -1), score.top_probs)
    assert pipe.score(result.codes, request).distributions is None


def test_cli_scores_a_codes_file(tmp_path, capsys):
    """`python -m omni_core score codes.npy --text ...`: a line on stdout, every frame's scores in --json."""
    import json

    from omni_core.cli import main

    pipe = our_pipeline("tiny")
    request = SpeechRequest("Score me please", max_frames=4)
    result = pipe.generate(request)
    np.save(tmp_path / "c.npy", result.codes)
    assert main(["score", str(tmp_path / "c.npy"), "--text", request.text, "--device", "cpu", "--dtype", "float32",
                 "--json", str(tmp_path / "s.json")]) == 0
    assert "4 frames scored" in capsys.readouterr().out
    scores = json.loads((tmp_path / "s.json").read_text())
    np.testing.assert_allclose(np.exp(scores["logprobs"]), result.probs, rtol=1e-6)
    assert np.array_equal(scores["top_codes"], result.top_codes)
    assert main(["score", str(tmp_path / "missing.npy"), "--text", "x"]) == 2


def test_a_long_score_lets_the_requests_being_generated_go_on_between_its_frames():
    """The score runs a frame per engine call: the engine takes a step for the request it is generating
    between each of the scored take's frames (a whole-take call held that request for the whole score)."""
    pipe = our_pipeline("tiny")
    take = pipe.generate(SpeechRequest("A take to score.", max_frames=12))
    stream = pipe.stream(SpeechRequest("A long request beside the score.", max_frames=400))
    try:
        next(e for e in stream if type(e).__name__ == "Frame")  # it is speaking
        before = pipe.engine.stepper.steps_taken
        score = pipe.score(take.codes, SpeechRequest("A take to score.", max_frames=12))
        steps = pipe.engine.stepper.steps_taken - before
    finally:
        stream.close()
    assert steps >= len(take.codes), f"{steps} steps of the other request during a {len(take.codes)}-frame score"
    assert_scores_are_the_reports(score, take)  # and the score is unchanged by them


def test_a_score_leaves_the_callers_autograd_as_it_was():
    """The score's parts run in the engine's thread, where autograd is off; closing them in the caller's
    thread must not turn it off there (a context held across a generator's yields once did, and later
    tests in the same process then ran without autograd)."""
    import gc

    import torch

    pipe = our_pipeline("tiny")
    request = SpeechRequest("Autograd stays on.", max_frames=3)
    take = pipe.generate(request)
    assert torch.is_grad_enabled()
    pipe.score(take.codes, request)
    gc.collect()
    assert torch.is_grad_enabled()
