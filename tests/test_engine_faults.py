"""The engine under faults: what a request brings fails it alone, a batched call that raises
fails only the row that caused it, a dead engine answers every caller with EngineError, a
closed pipeline lets go of its thread and weights, and memory is bounded whatever callers do."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from omni_core import EngineError, Frame, RequestError, SpeechRequest, load_pipeline

from .conftest import our_pipeline
from .test_engine import assert_same, collect

GOOD = [SpeechRequest("Fine, chatting.", mode="chat", max_frames=6, max_text_tokens=4),
        SpeechRequest("Fine, and sampled.", do_sample=True, seed=3, max_frames=6),
        SpeechRequest("Fine, and greedy.", max_frames=7)]


class BrokenFlag(threading.Event):
    def is_set(self):
        raise RuntimeError("this cancel flag is broken")


def test_a_bad_cancel_or_budget_is_refused_where_it_enters():
    pipe = our_pipeline("tiny")
    with pytest.raises(RequestError, match="cancel must be a threading.Event"):
        pipe.stream(SpeechRequest("Not an event."), cancel=False)
    for budget in ("soon", 0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="time_budget_s must be a positive number"):
            pipe.time_budget_s = budget
    with pytest.raises(ValueError, match="time_budget_s"):
        load_pipeline("tiny", device="cpu", time_budget_s="soon")
    assert pipe.time_budget_s is None
    assert pipe.generate(SpeechRequest("Still serving.", max_frames=3)).stats.frames == 3


def test_a_request_whose_own_checks_raise_fails_alone():
    """A cancel flag that raises when the scheduler reads it fails its request alone; a healthy
    request beside it, and one submitted after it, complete with their solo codes."""
    pipe = our_pipeline("tiny")
    want = pipe.generate(GOOD[2])
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(pipe.generate, GOOD[2])
        broken = pool.submit(pipe.generate, SpeechRequest("Bad flag.", max_frames=5), cancel=BrokenFlag())
        with pytest.raises(RuntimeError, match="cancel flag is broken"):
            broken.result(timeout=60)
        assert_same(running.result(timeout=60), want)
    assert_same(pipe.generate(GOOD[2]), want)


def first_inputs(module, run) -> list[torch.Tensor]:
    """Row 0 of `module`'s input at each call while run() runs alone."""
    seen = []
    hook = module.register_forward_hook(lambda m, args, out: seen.append(args[0][0].clone()))
    try:
        run()
    finally:
        hook.remove()
    return seen


BATCHED_CALLS = {  # the module a batched call runs, and which of the doomed request's calls to break
    "thinker rows": (lambda pipe: pipe.thinker.lm_head, 1),  # call 0 is the prefill, 1 the first batched step
    "talker rows": (lambda pipe: pipe.talker.model.norm, 1),
    "CB0 head": (lambda pipe: pipe.talker.codec_head, 0),
    "predictor": (lambda pipe: pipe.talker.code_predictor.lm_head[0], 0),  # its rows: [B, H]
}


@pytest.mark.parametrize("call", list(BATCHED_CALLS))
def test_a_fault_in_a_batched_call_fails_only_its_row(monkeypatch, caplog, call):
    """The doomed row's input to one batched call raises; the requests sharing that call (greedy,
    sampled, chat) equal their solo runs."""
    pipe = our_pipeline("tiny")
    doomed = SpeechRequest("Doomed.", mode="chat", do_sample=True, seed=7, max_frames=6, max_text_tokens=4)
    solo = [pipe.generate(r) for r in GOOD]
    module_of, index = BATCHED_CALLS[call]
    module = module_of(pipe)
    poison = first_inputs(module, lambda: pipe.generate(doomed))[index]
    forward = module.forward

    def faulty(x, *args, **kwargs):
        if any(row.shape == poison.shape and torch.equal(row, poison) for row in x):
            raise RuntimeError(f"fault in the {call}")
        return forward(x, *args, **kwargs)

    monkeypatch.setattr(module, "forward", faulty)
    streams = pipe.stream_together(GOOD + [doomed])  # one batch: the doomed row is in every call
    with pytest.raises(RuntimeError, match=f"fault in the {call}"):
        collect(streams[-1])
    for stream, want in zip(streams, solo):
        assert_same(collect(stream), want)
    assert "running its rows one at a time" in caplog.text  # the fault came in a call of several rows


@pytest.mark.parametrize("stage", ["talker", "thinker"])
def test_a_fault_in_a_packed_prefill_fails_only_its_request(monkeypatch, caplog, stage):
    """The doomed request's prompt piece raises inside a packed prefill call (its last position reaches the
    stack's final norm): the call runs again request by request, the doomed request fails alone, and the
    requests whose pieces shared the call (greedy, sampled, chat) equal their solo runs."""
    pipe = our_pipeline("tiny")
    doomed = SpeechRequest("Doomed, with a prompt of its own.", mode="chat" if stage == "thinker" else "speak",
                           max_frames=6, max_text_tokens=4)
    solo = [pipe.generate(r) for r in GOOD]
    norm = (pipe.thinker if stage == "thinker" else pipe.talker).model.norm
    poison = first_inputs(norm, lambda: pipe.generate(doomed))[0][-1]  # call 0 is its prompt's: [T, C]
    forward = norm.forward

    def faulty(x, *args, **kwargs):
        if any(torch.equal(row, poison) for row in x.reshape(-1, x.shape[-1])):
            raise RuntimeError(f"fault in the {stage}'s prefill")
        return forward(x, *args, **kwargs)

    monkeypatch.setattr(norm, "forward", faulty)
    streams = pipe.stream_together(GOOD + [doomed])  # taken in at one step: their prompts share a call
    with pytest.raises(RuntimeError, match=f"fault in the {stage}'s prefill"):
        collect(streams[-1])
    for stream, want in zip(streams, solo):
        assert_same(collect(stream), want)
    assert f"a batched {stage} call of" in caplog.text  # the fault came in a call of several requests' pieces


class Killed(BaseException):
    """Not an Exception: nothing in the step catches it, so it ends the engine's thread."""


def test_a_dead_engine_answers_every_caller_within_a_second(monkeypatch):
    pipe = load_pipeline("tiny", device="cpu", max_batch=2)
    norm, kill = pipe.talker.model.norm, threading.Event()
    forward = norm.forward

    def dies(*args, **kwargs):
        if kill.is_set():
            raise Killed("the engine thread was killed mid-step")
        return forward(*args, **kwargs)

    monkeypatch.setattr(norm, "forward", dies)
    streams = [pipe.stream(SpeechRequest(f"Caller {i}.", max_frames=200)) for i in range(4)]  # 2 run, 2 wait
    next(s for s in streams[0] if isinstance(s, Frame))
    errors = []

    def read(stream):
        try:
            collect(stream)
        except EngineError as exc:
            errors.append((time.monotonic(), str(exc)))

    with ThreadPoolExecutor(4) as pool:
        readers = [pool.submit(read, s) for s in streams]
        time.sleep(0.2)
        killed_at = time.monotonic()
        kill.set()
        for reader in readers:
            reader.result(timeout=5)
    assert len(errors) == 4 and all(t - killed_at < 1.0 for t, _ in errors)
    assert all("the engine thread died" in message and "killed mid-step" in message for _, message in errors)
    start = time.monotonic()
    with pytest.raises(EngineError, match="died"):
        pipe.stream(SpeechRequest("Later."))
    with pytest.raises(EngineError, match="died"):
        pipe.call(len, [])
    assert time.monotonic() - start < 0.5


def test_close_ends_the_thread_fails_what_it_holds_and_lets_go_of_the_weights():
    with load_pipeline("tiny", device="cpu") as pipe:
        pipe.generate(SpeechRequest("One before closing.", max_frames=3))
        thread = pipe.engine._thread
        held = pipe.stream(SpeechRequest("Still running at close.", max_frames=500))
        next(e for e in held if isinstance(e, Frame))
    assert not thread.is_alive()
    with pytest.raises(EngineError, match="closed"):
        collect(held)
    start = time.monotonic()
    for later in (lambda: pipe.stream(SpeechRequest("After.")), lambda: pipe.call(len, []),
                  lambda: pipe.decode([[0] * 16])):
        with pytest.raises(EngineError, match="the pipeline is closed"):
            later()
    assert time.monotonic() - start < 0.5
    talker = weakref.ref(pipe.talker)
    del pipe, held, later
    gc.collect()
    assert talker() is None, "something still holds the closed pipeline's weights"


# ---- bounds: the waiting line, slow readers --------------------------------------------------

def first_frame(stream) -> None:
    next(e for e in stream if isinstance(e, Frame))


def test_at_most_max_waiting_requests_wait_and_the_rest_are_refused():
    pipe = our_pipeline("tiny", max_batch=1)  # max_waiting: 4 x max_batch
    running = pipe.stream(SpeechRequest("Hold the only slot.", max_frames=1500))
    first_frame(running)
    accepted, refused = [], []
    for i in range(300):
        try:
            accepted.append(pipe.stream(SpeechRequest(f"Wait {i}.", max_frames=2)))
        except RequestError as exc:
            refused.append(str(exc))
    running.close()
    assert len(accepted) == 4 and len(refused) == 296
    assert "4 requests are waiting (at most 4)" in refused[0]
    assert [collect(s).stats.frames for s in accepted] == [2] * 4


@pytest.fixture(scope="module")
def impatient():
    """Pauses a reader 8 frames behind; stops it after 1 s paused."""
    return our_pipeline("tiny", max_unread=8, stall_s=1.0)


def test_a_slow_reader_is_paused_and_resumes_with_the_same_codes(impatient):
    request = SpeechRequest("A slow reader.", max_frames=30)
    want = impatient.generate(request)
    stream = impatient.stream(request)
    first_frame(stream)
    deadline = time.monotonic() + 30
    while not stream.paused and time.monotonic() < deadline:
        time.sleep(0.01)
    made = stream.frames_made
    time.sleep(0.3)
    assert stream.paused and stream.frames_made == made <= 1 + 8 + 1  # out of the batch: nothing more made
    assert_same(collect(stream), want)


def test_a_reader_that_stays_away_is_stopped_as_stalled(impatient):
    stream = impatient.stream(SpeechRequest("Nobody reads me.", max_frames=500))
    deadline = time.monotonic() + 30
    while stream.stopped is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stream.stopped == "stalled" and stream.frames_made <= 10
    result = collect(stream)
    assert result.stats.stopped == "stalled" and any("not read" in w for w in result.stats.warnings)
    assert impatient.active == 0
