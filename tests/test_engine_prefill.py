"""Newcomers' prompts prefilled together: the pieces of several requests run as one packed model call
(`Step.prefill`, `Runner.prefill`, `DecoderStack.prefill_rows`), and every request still equals its solo
run bit for bit; beside speaking rows a step prefills at most its budget's positions, in whole pieces."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import pytest

from omni_core import Done, Frame, SpeechRequest

from .conftest import our_pipeline
from .test_engine import assert_same, collect

LONG = ("A newcomer with a much longer text, so that its prompt is cut into many pieces and takes several "
        "steps to read.")
TEXTS = ["Hi.", LONG, "A short one here.", "Medium length text for the talker, a few words more."]


def newcomers(preset: str) -> list[SpeechRequest]:
    """Eight requests of other prompt lengths, greedy and sampled, both predictors; on Qwen3-Omni some chat
    (their thinker's prompts are prefilled too), on Qwen3-TTS some read the whole text in their prompt."""
    out = []
    for i in range(8):
        text = TEXTS[i % 4] if i < 4 else f"{TEXTS[i % 4]} Number {i}."
        options = dict(max_frames=4 + i % 3, predictor="kv" if i % 2 else "reprefill",
                       do_sample=i % 3 == 1, seed=i)
        if preset == "tiny":
            options.update(mode="chat", max_text_tokens=4) if i in (1, 4, 6) else None
        elif i % 4 != 3:
            options.update(text_input="whole")
        out.append(SpeechRequest(text, **options))
    return out


@contextmanager
def prefill_calls(pipe):
    """Record every prefill call: (step, stage, [(text, positions of its piece)], frames of the rows speaking);
    and count the talker's and thinker's model calls: {stage: [rows of each call]}."""
    runner, engine = pipe.engine.runner, pipe.engine
    calls, model_calls, real = [], {"talker": [], "thinker": []}, runner.prefill

    def logged(stage, seqs):
        pieces = [(s.req.text, min(runner.prefill_chunk, (s.thinker_todo if stage == "thinker" else s.talker_todo)
                                   .shape[1])) for s in seqs]
        speaking = [len(s.codes) for s in engine.scheduler.running if s.talking]
        calls.append((engine.stepper.steps_taken, stage, pieces, speaking))
        return real(stage, seqs)

    stacks = {"talker": pipe.talker.model}
    if getattr(pipe, "thinker", None) is not None:
        stacks["thinker"] = pipe.thinker.model
    for stage, stack in stacks.items():
        forward, rows = stack.forward, stack.prefill_rows
        stack.forward = lambda h, *a, _f=forward, _s=stage: model_calls[_s].append(1) or _f(h, *a)
        stack.prefill_rows = lambda p, c, _f=rows, _s=stage: model_calls[_s].append(len(p)) or _f(p, c)
    runner.prefill = logged
    try:
        yield calls, model_calls
    finally:
        del runner.prefill
        for stack in stacks.values():
            del stack.forward, stack.prefill_rows


@contextmanager
def prefill_settings(pipe, chunk: int, budget: int):
    runner, stepper = pipe.engine.runner, pipe.engine.stepper
    before = runner.prefill_chunk, stepper.prefill_budget
    runner.prefill_chunk, stepper.prefill_budget = chunk, budget
    try:
        yield
    finally:
        runner.prefill_chunk, stepper.prefill_budget = before


def arriving_mid_stream(pipe, speaker: SpeechRequest, requests: list[SpeechRequest], after_frames: int):
    """Stream `speaker`; after its `after_frames`-th frame, hand `requests` to the engine together.
    Returns the speaker's result and theirs."""
    streams, frames, spoken = None, 0, None
    for event in pipe.stream(speaker):
        frames += isinstance(event, Frame)
        if frames == after_frames and streams is None:
            streams = pipe.stream_together(requests)
        if isinstance(event, Done):
            spoken = event.result
    return spoken, [collect(s) for s in streams]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("preset", ["tiny", "tiny-tts"])
def test_requests_arriving_together_equal_their_solo_runs(preset, dtype):
    """1, 3 and 8 requests of other prompt lengths (most longer than one piece of 16 positions) handed to an
    idle engine at once, and the 8 beside a speaking request (a budget of two pieces a step): each request's
    codes, probabilities, alternatives, text and audio equal its solo run's bit for bit."""
    pipe = our_pipeline(preset, dtype)
    requests = newcomers(preset)
    speaker = SpeechRequest("Speaking already.", predictor="kv", max_frames=30)
    with prefill_settings(pipe, chunk=16, budget=32), prefill_calls(pipe) as (calls, _):
        solo = [pipe.generate(r) for r in [speaker] + requests]
        per_request = Counter(text for _, _, pieces, _ in calls for text, _ in pieces)
        assert max(per_request.values()) > 2 and max(n for _, _, p, _ in calls for _, n in p) == 16, calls
        for count in (1, 3, 8):
            calls.clear()
            together = [collect(s) for s in pipe.stream_together(requests[:count])]
            for got, want in zip(together, solo[1:]):
                assert_same(got, want)
            speaking = sum(r.mode == "speak" for r in requests[:count])  # their talker prompts start at once
            assert max(len(p) for _, stage, p, _ in calls if stage == "talker") >= speaking, calls
        calls.clear()
        spoken, beside = arriving_mid_stream(pipe, speaker, requests, after_frames=2)
    assert_same(spoken, solo[0])
    for got, want in zip(beside, solo[1:]):
        assert_same(got, want)
    beside_steps = Counter()  # positions prefilled per step while the speaker spoke
    for step, _, pieces, speaking in calls:
        beside_steps[step] += sum(n for _, n in pieces) if speaking else 0
    assert max(beside_steps.values()) == 32, calls  # the budget: two pieces' positions a step, and no more


@pytest.mark.parametrize("preset", ["tiny", "tiny-tts"])
def test_eight_newcomers_prompts_run_as_one_model_call(preset):
    """Eight speaking requests arriving together at an idle engine: their talker prompts (one piece each) run
    as one talker call of 8 pieces, not 8 calls; three chat requests' thinker prompts as one thinker call."""
    pipe = our_pipeline(preset)
    short = [text for text in TEXTS if text != LONG]  # one piece each
    requests = [SpeechRequest(f"{short[i % 3]} Call {i}.", max_frames=2, seed=i) for i in range(8)]
    with prefill_calls(pipe) as (calls, model_calls):
        results = [collect(s) for s in pipe.stream_together(requests)]
    assert [r.stats.frames for r in results] == [2] * 8
    assert model_calls["talker"] == [8], (model_calls, calls)  # a packed call of 8 pieces, no call of its own
    if preset == "tiny":
        chats = [SpeechRequest(text, mode="chat", max_frames=2, max_text_tokens=3) for text in short]
        with prefill_calls(pipe) as (calls, model_calls):
            [collect(s) for s in pipe.stream_together(chats)]
        assert model_calls["thinker"] == [3], (model_calls, calls)


@pytest.mark.parametrize("pieces", [1, 3])
def test_prompts_admitted_mid_stream_delay_the_speaking_row_by_at_most_the_budget(pieces):
    """Counted, not timed: while a row speaks, every step prefills at most the budget's positions (`pieces`
    pieces of 6), in whole pieces, one per request, in admission order, as one packed call, and the speaking
    row makes a frame in every one of those steps. A long prompt and two short ones arrive together beside
    it; alone, the long prompt runs all its pieces in its first step. Every request equals its solo run."""
    pipe = our_pipeline("tiny")
    speaker = SpeechRequest("Speaking already.", predictor="kv", max_frames=40)
    burst = [SpeechRequest(LONG, max_frames=6), SpeechRequest("Short.", max_frames=4, seed=1, do_sample=True),
             SpeechRequest("Also short.", max_frames=4, predictor="kv")]
    with prefill_settings(pipe, chunk=6, budget=6 * pieces), prefill_calls(pipe) as (calls, _):
        solo = [pipe.generate(r) for r in [speaker] + burst]
        long_alone = [(step, n) for step, _, pieces_, _ in calls for text, n in pieces_ if text == LONG]
        assert len(long_alone) > 10 and len({step for step, _ in long_alone}) == 1, calls  # one step, alone
        calls.clear()
        speaker_result, together = arriving_mid_stream(pipe, speaker, burst, after_frames=3)
    beside = [(step, pieces_, speaking[0]) for step, _, pieces_, speaking in calls if speaking]
    steps = [step for step, _, _ in beside]
    assert len(steps) > 10 and len(set(steps)) == len(steps), calls  # one packed call a step
    assert steps == list(range(steps[0], steps[0] + len(steps))), calls  # a prompt piece in every step
    order = [r.text for r in burst]
    for step, pieces_, _ in beside:
        texts = [text for text, _ in pieces_]
        assert sum(n for _, n in pieces_) <= 6 * pieces and all(n <= 6 for _, n in pieces_), calls
        assert texts == sorted(texts, key=order.index) and len(set(texts)) == len(texts), calls
    assert max(len(pieces_) for _, pieces_, _ in beside) == min(pieces, 3), calls
    made = [frames for _, _, frames in beside]
    assert made == list(range(made[0], made[0] + len(made))), calls  # the speaker made a frame every step
    assert_same(speaker_result, solo[0])
    for got, want in zip(together, solo[1:]):
        assert_same(got, want)
