"""The batched engine: every request equals its solo run, whatever runs beside it; stop,
close, budgets and failures touch only their own request; one predictor call per step."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from omni_core import Done, Frame, SpeechRequest
from omni_core.codec.streaming import StreamingDecoder
from omni_core.engine import Sequence, Stream
from omni_core.models.layers import KVCache
from omni_core.models.qwen3_omni.prompt import TalkerPromptBuilder

from .conftest import our_pipeline

MIX = [  # different modes, predictors, sampling settings and lengths
    SpeechRequest("First voice.", seed=1, do_sample=True, max_frames=10),
    SpeechRequest("Second voice, greedy.", predictor="kv", max_frames=14),
    SpeechRequest("Third voice.", seed=2, do_sample=True, predictor="kv", top_k=20, temperature=0.7, max_frames=8),
    SpeechRequest("Fourth one chats.", mode="chat", max_frames=9, max_text_tokens=6),
    SpeechRequest("Fifth compares.", predictor="compare", speaker="chelsie", max_frames=11),
    SpeechRequest("Sixth chats and samples.", mode="chat", do_sample=True, seed=5, top_p=0.8, max_frames=12,
                  max_text_tokens=5),
    SpeechRequest("Seventh, a longer greedy one.", max_frames=20, repetition_penalty=1.2),
    SpeechRequest("Eighth compares, sampled.", predictor="compare", do_sample=True, seed=9, max_frames=7),
]


def collect(stream: Stream):
    for event in stream:
        if isinstance(event, Done):
            return event.result
    raise AssertionError("no Done event")


def assert_same(got, want):
    """Bit for bit: codes, text and audio, and the floats behind the codes (each code's probability and its
    alternatives'), where a last bit that no code shows would otherwise hide."""
    np.testing.assert_array_equal(got.codes, want.codes)
    for floats in ("probs", "top_codes", "top_probs"):
        np.testing.assert_array_equal(getattr(got, floats), getattr(want, floats), err_msg=floats)
    assert got.text_ids == want.text_ids
    np.testing.assert_array_equal(got.audio, want.audio)  # the codec decodes rows together, each as alone


def staggered(pipe, requests, after_frames: int = 3):
    """Run the requests at once, each started when the one before it has made `after_frames`
    frames (so that some join while others are mid-utterance); results in request order."""
    results = [None] * len(requests)
    started = [threading.Event() for _ in requests] + [threading.Event()]
    started[0].set()

    def run(i):
        started[i].wait()
        frames = 0
        try:
            for event in pipe.stream(requests[i]):
                if isinstance(event, Frame):
                    frames += 1
                    if frames == after_frames:
                        started[i + 1].set()
                if isinstance(event, Done):
                    results[i] = event.result
                    return
        finally:
            started[i + 1].set()  # also when this request failed: the next ones still run

    with ThreadPoolExecutor(len(requests)) as pool:
        list(pool.map(run, range(len(requests))))
    return results


@contextmanager
def emit_calls(engine):
    """Record every `Step.emit` call: (step, [(text, frames made before it)], [audio chunks after it]) per row."""
    stepper = engine.stepper
    calls, real = [], stepper.emit

    def logged(seqs, cb0, predicted):
        before = [(s.req.text, len(s.codes)) for s in seqs]
        real(seqs, cb0, predicted)
        calls.append((stepper.steps_taken, before, [len(s.audio) for s in seqs]))

    stepper.emit = logged
    try:
        yield calls
    finally:
        del stepper.emit


def first_frames(calls) -> list[list[str]]:
    """Per recorded emit call, the texts of the requests that made their first frame in it (sorted)."""
    return [sorted(text for text, made in rows if made == 0) for _, rows, _ in calls]


@pytest.mark.parametrize("count", [1, 3, 8])
def test_concurrent_requests_equal_their_solo_runs(count):
    pipe = our_pipeline("tiny")
    requests = MIX[:count]
    solo = [pipe.generate(r) for r in requests]
    together = staggered(pipe, requests)
    for got, want in zip(together, solo):
        assert_same(got, want)
    if count > 1:
        assert max(r.stats.batch_max for r in together) >= 2, "the requests never shared a step"


def test_a_newcomers_first_frame_and_audio_come_before_the_speaking_rows_step():
    """A request admitted mid-stream makes its first frame and first audio in calls of its own, before the
    speaking rows' frames of that step (not after their whole step); both still equal their solo runs."""
    pipe = our_pipeline("tiny")
    engine = pipe.engine
    speaker = SpeechRequest("Speaking already.", predictor="kv", max_frames=12)
    newcomer = SpeechRequest("Just arrived.", max_frames=6, seed=4)
    solo = [pipe.generate(speaker), pipe.generate(newcomer)]
    with emit_calls(engine) as calls:
        together = staggered(pipe, [speaker, newcomer], after_frames=3)
    first = next(i for i, (_, rows, _) in enumerate(calls) if (newcomer.text, 0) in rows)
    step, rows, audio = calls[first]
    assert rows == [(newcomer.text, 0)] and audio == [1], calls  # alone, and its first audio is out
    assert calls[first + 1][0] == step and [t for t, _ in calls[first + 1][1]] == [speaker.text], calls
    assert_same(together[0], solo[0])
    assert_same(together[1], solo[1])


def test_a_burst_of_newcomers_beside_a_speaking_row_starts_in_one_step():
    """Five short prompts admitted together beside a speaking row fit the step's prefill budget (one piece
    each): all five make their first frame in one call, the speaker its frame in that same step."""
    pipe = our_pipeline("tiny")
    engine = pipe.engine
    speaker = SpeechRequest("Speaking already.", predictor="kv", max_frames=16)
    burst = [SpeechRequest(f"Newcomer number {i} arrives with the others.", max_frames=3, seed=i) for i in range(5)]
    with emit_calls(engine) as calls:
        frames, streams = 0, None
        for event in pipe.stream(speaker):
            frames += isinstance(event, Frame)
            if frames == 3 and streams is None:
                streams = pipe.stream_together(burst)
        results = [collect(s) for s in streams]
    firsts = [(call[0], new) for call, new in zip(calls, first_frames(calls)) if new and speaker.text not in new]
    assert firsts[0][1] == sorted(r.text for r in burst), calls
    assert any(step == firsts[0][0] and [t for t, _ in rows] == [speaker.text] for step, rows, _ in calls), calls
    assert [r.stats.frames for r in results] == [3] * 5


def test_requests_sent_a_little_apart_to_an_idle_engine_start_in_one_step():
    """An idle engine handed a request waits while more keep coming (`gather_s`: here generous, for a loaded
    test machine), so requests from separate threads, 50 ms apart, make their first frames in one call."""
    pipe = our_pipeline("tiny")
    engine = pipe.engine
    requests = [SpeechRequest(f"Burst number {i}.", max_frames=3, seed=i) for i in range(3)]

    def run(i):
        time.sleep(0.05 * i)
        return collect(pipe.stream(requests[i]))

    before, engine.gather_s = engine.gather_s, (0.3, 3.0)
    try:
        with emit_calls(engine) as calls, ThreadPoolExecutor(len(requests)) as pool:
            results = list(pool.map(run, range(len(requests))))
    finally:
        engine.gather_s = before
    assert first_frames(calls)[0] == sorted(r.text for r in requests), calls
    assert [r.stats.frames for r in results] == [3, 3, 3]


def test_concurrent_requests_equal_their_solo_runs_with_all_cores():
    """The same, with the engine's kernels on 2 threads (the tests otherwise run on 1)."""
    pipe = our_pipeline("tiny")
    before = torch.get_num_threads(), pipe.engine.threads
    torch.set_num_threads(2)
    pipe.engine.threads = 2  # what every engine thread sets when it starts (an idle one ends after 1 s)
    pipe.call(torch.set_num_threads, 2)  # the engine's thread runs the kernels
    try:
        assert pipe.call(torch.get_num_threads) == 2
        requests = [dataclasses.replace(r, max_frames=5) for r in MIX[:5]]  # 2 spinning threads are slow on 2 shared cores
        solo = [pipe.generate(r) for r in requests]
        together = staggered(pipe, requests, after_frames=2)
    finally:
        torch.set_num_threads(before[0])
        pipe.engine.threads = before[1]
        pipe.call(torch.set_num_threads, before[1])
    for got, want in zip(together, solo):
        assert_same(got, want)


def test_17_to_32_rows_equal_their_solo_runs():
    """Batches in the second block size of the batch-invariant matmuls (17..32 rows)."""
    pipe = our_pipeline("tiny", max_batch=32)
    requests = [dataclasses.replace(MIX[i % len(MIX)], text=f"Row {i}: {MIX[i % len(MIX)].text}", seed=i,
                                    max_frames=4 + i % 3, max_text_tokens=3) for i in range(24)]
    solo = [pipe.generate(r) for r in requests]
    results = [collect(s) for s in pipe.stream_together(requests)]
    for got, want in zip(results, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in results) == 24


@pytest.mark.parametrize("preset, dtype", [("tiny-b", "float32"), ("tiny", "bfloat16")])
def test_requests_taken_in_together_equal_their_solo_runs(preset, dtype):
    pipe = our_pipeline(preset, dtype)
    solo = [pipe.generate(r) for r in MIX]
    streams = pipe.stream_together(MIX)
    for stream, want in zip(streams, solo):
        result = collect(stream)
        assert_same(result, want)
        assert result.stats.batch_max == len(MIX)


def test_one_predictor_call_per_step_for_all_rows():
    """Both kinds, compare mode and sampled rows in one eager call a step, never a loop over rows or kinds."""
    pipe = our_pipeline("tiny")
    preds, batches = pipe.predictors, []
    original = preds.run_rows

    def recording(kinds, graphs, h, *args, **kwargs):
        batches.append((tuple(sorted(kinds)), h.shape[0]))
        return original(kinds, graphs, h, *args, **kwargs)

    preds.run_rows = recording
    try:
        requests = [SpeechRequest(f"Row {i}.", max_frames=6, do_sample=i % 2 == 1, seed=i, predictor=p)
                    for i, p in enumerate(("reprefill", "kv", "compare", "kv"))]
        streams = pipe.stream_together(requests)
        results = [collect(s) for s in streams]
    finally:
        del preds.run_rows
    assert all(r.stats.frames == 6 for r in results)
    assert batches == [(("kv", "kv", "kv", "reprefill", "reprefill"), 5)] * 6


def test_a_cancelled_request_stops_within_a_step_and_the_others_finish():
    pipe = our_pipeline("tiny")
    others = [SpeechRequest("Keep going.", max_frames=30), SpeechRequest("Me too.", predictor="kv", max_frames=25)]
    solo = [pipe.generate(r) for r in others]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(pipe.generate, r) for r in others]
        cancel = threading.Event()
        stream = pipe.stream(SpeechRequest("Stop me soon.", max_frames=200), cancel=cancel)
        seen = 0
        for event in stream:
            if isinstance(event, Frame):
                seen += 1
                if seen == 3:
                    made = stream.frames_made
                    cancel.set()
            if isinstance(event, Done):
                stopped = event.result
        for future, want in zip(futures, solo):
            assert_same(future.result(), want)
    assert stopped.stats.stopped == "cancelled"
    assert 3 <= stopped.stats.frames <= made + 1  # at most the step that was running when Stop came


def test_closing_the_stream_stops_the_request_and_releases_it():
    pipe = our_pipeline("tiny")
    stream = pipe.stream(SpeechRequest("A client that disconnects.", max_frames=200))
    for event in stream:
        if isinstance(event, Frame):
            break
    made = stream.frames_made
    stream.close()  # what a server does when the browser goes away
    deadline = time.monotonic() + 10
    while not stream.released and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.released  # caches and codec stream dropped
    assert stream.frames_made <= made + 1  # no frame after the step that was running
    assert stream.stopped == "cancelled"
    assert pipe.active == 0


def test_time_budget_stops_a_running_request():
    pipe = our_pipeline("tiny")
    pipe.time_budget_s = 1e-6  # spent by the first step after admission
    try:
        result = pipe.generate(SpeechRequest("Budgeted.", max_frames=100))
    finally:
        pipe.time_budget_s = None
    assert result.stats.stopped == "time_budget" and 1 <= result.stats.frames < 100
    assert any("time budget" in w for w in result.stats.warnings)


def test_the_budget_counts_from_admission_and_the_wait_is_its_own_stat():
    """max_batch 1: a long request is stopped by the budget; a short one queued behind it for
    about that long still gets its whole budget, runs to its end, and reports its queue time."""
    pipe = our_pipeline("tiny", max_batch=1)
    short = SpeechRequest("A short one.", max_frames=6)
    want = pipe.generate(short)
    budget = max(1.0, 3 * want.stats.total_s)
    pipe.time_budget_s = budget
    try:
        long = pipe.stream(SpeechRequest("A long one.", max_frames=1500))
        next(e for e in long if isinstance(e, Frame))
        got = collect(pipe.stream(short))
        stopped = collect(long)
    finally:
        pipe.time_budget_s = None
    assert stopped.stats.stopped == "time_budget" and stopped.stats.frames < 1500
    assert_same(got, want)
    s = got.stats
    assert s.stopped == "max_frames" and s.queue_s > 0.5 * budget
    assert s.total_s >= s.queue_s + s.talker_s + s.predictor_s
    assert s.first_audio_s == pytest.approx(s.queue_s + s.first_audio_admitted_s, abs=1e-3)
    assert want.stats.queue_s < 0.5 * budget


def test_cancelling_a_waiting_request_ends_it_before_it_runs():
    pipe = our_pipeline("tiny", max_batch=1)
    holder = pipe.stream(SpeechRequest("Hold the only slot.", max_frames=200))
    next(e for e in holder if isinstance(e, Frame))
    cancel = threading.Event()
    waiting = pipe.stream(SpeechRequest("Never mind.", max_frames=10), cancel=cancel)
    cancel.set()
    result = collect(waiting)
    assert result.stats.stopped == "cancelled" and result.stats.frames == 0
    assert holder.stopped is None  # the running one was not touched
    holder.close()


def test_a_failing_request_fails_alone(monkeypatch):
    """One request's codec push raises, another's talker prompt raises: those two fail with their
    errors, the others equal their solo runs, and the engine serves on."""
    pipe = our_pipeline("tiny")
    good = [SpeechRequest("I am fine.", max_frames=12), SpeechRequest("Me too.", mode="chat", max_frames=10)]
    solo = [pipe.generate(r) for r in good]
    doomed = SpeechRequest("I will fail.", max_frames=12)
    doomed_first = pipe.generate(doomed).codes[0]
    push, prompt = pipe.code2wav.forward, TalkerPromptBuilder.prompt
    broken_prompt = pipe.chat_prompt("Who?")

    def failing_push(codes, *args, **kwargs):  # faults on a call holding the doomed request's codes
        if codes.shape[-1] and any((row[:, 0].cpu().numpy() == doomed_first).all() for row in codes):
            raise RuntimeError("codec push failed for this request")
        return push(codes, *args, **kwargs)

    def failing_prompt(self, prompt_ids, *args):
        if list(prompt_ids) == broken_prompt:
            raise KeyError("nobody")
        return prompt(self, prompt_ids, *args)

    monkeypatch.setattr(pipe.code2wav, "forward", failing_push)
    monkeypatch.setattr(TalkerPromptBuilder, "prompt", failing_prompt)
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(pipe.generate, r) for r in good]
        with pytest.raises(RuntimeError, match="codec push failed"):
            pipe.generate(doomed)
        with pytest.raises(KeyError, match="nobody"):
            pipe.generate(SpeechRequest("Who?"))
        for future, want in zip(futures, solo):
            assert_same(future.result(), want)
    assert pipe.generate(good[0]).codes.shape == solo[0].codes.shape  # the engine still serves


def test_stage_times_add_up_and_land_in_their_own_stage():
    pipe = our_pipeline("tiny")
    for mode in ("chat", "speak"):
        s = pipe.generate(SpeechRequest("Count my time.", mode=mode, max_frames=12, max_text_tokens=6)).stats
        assert s.thinker_s + s.talker_s + s.predictor_s + s.codec_s <= s.total_s
        assert min(s.talker_s, s.predictor_s, s.codec_s) > 0
    others = s.talker_s + s.predictor_s + s.thinker_s  # the speak request's other stages, at normal speed
    codec, slow = pipe.code2wav, 0.5  # per push: more than the other stages take
    original = codec.forward

    def slowed(*args, **kwargs):
        time.sleep(slow)
        return original(*args, **kwargs)

    codec.forward = slowed
    try:
        s = pipe.generate(SpeechRequest("Count my time.", max_frames=12)).stats
    finally:
        del codec.forward
    pushes = 4  # chunks of 1, 2, 4, then the last 5 frames
    assert s.codec_s >= pushes * slow
    # the sleep is nowhere else: the other stages take what they took at normal speed, not the 2 s of
    # sleep (half of it is the margin for a loaded machine: they once took 1.1 s here beside a compile)
    assert s.talker_s + s.predictor_s + s.thinker_s < others + pushes * slow / 2


def test_speak_mode_never_runs_the_thinker_forward():
    pipe = our_pipeline("tiny")
    calls = []
    hook = pipe.thinker.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        result = pipe.generate(SpeechRequest("No thinking needed.", max_frames=8))
    finally:
        hook.remove()
    assert result.stats.frames == 8 and calls == []
    hook = pipe.thinker.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        pipe.generate(SpeechRequest("Chat thinks.", mode="chat", max_frames=4, max_text_tokens=4))
    finally:
        hook.remove()
    assert calls  # the hook does see the thinker when it runs


def test_finished_requests_leave_nothing_alive(monkeypatch):
    """Every request, KV cache and codec stream made while serving 48 requests of every kind,
    8 at a time, is gone once they are done (weak references, not a memory margin)."""
    pipe = our_pipeline("tiny")
    live = weakref.WeakSet()
    for cls in (Sequence, KVCache, StreamingDecoder):
        def tracked(self, *args, _init=cls.__init__, **kwargs):
            _init(self, *args, **kwargs)
            live.add(self)
        monkeypatch.setattr(cls, "__init__", tracked)
    requests = [dataclasses.replace(MIX[i % len(MIX)], max_frames=4, max_text_tokens=3) for i in range(8)]
    peak = []
    with ThreadPoolExecutor(8) as pool:
        for _ in range(6):
            streams = [pool.submit(pipe.generate, r) for r in requests]
            peak.append(len(live))
            [s.result() for s in streams]
    pipe.call(gc.collect)  # at the engine's next step boundary: the last step's locals are gone by then
    # (a caller that has read Done can run ahead of the end of the step that sent it)
    assert max(peak) > 0  # the tracking sees requests while they run
    assert [type(x).__name__ for x in live] == [] and pipe.active == 0


def test_rows_above_the_largest_bucket_run_in_bucket_size_chunks():
    """40 rows through the predictor: no call sees more than 32 rows (the largest bucket: the most a
    compiled frame or CUDA graph takes), and every row gets the codes it gets alone."""
    from omni_core.fast.buckets import BUCKETS

    pipe = our_pipeline("tiny")
    cp, C = pipe.talker.code_predictor, pipe.config.talker.hidden_size
    h, e0 = (torch.randn(40, C, generator=torch.Generator().manual_seed(s)) for s in (1, 2))
    gens = [torch.Generator().manual_seed(i) if i % 2 else None for i in range(40)]
    sizes = []
    hook = cp.model.register_forward_hook(lambda m, args, out: sizes.append(args[0].shape[0]))
    try:
        together = pipe.call(torch.no_grad()(pipe.predictors.run), "reprefill", h, e0, gens)
    finally:
        hook.remove()
    assert max(sizes) == BUCKETS[-1] and set(sizes) == {BUCKETS[-1], 40 - BUCKETS[-1]}
    gens = [torch.Generator().manual_seed(i) if i % 2 else None for i in range(40)]
    for b in (0, 1, 33, 39):
        alone = pipe.call(torch.no_grad()(pipe.predictors.run), "reprefill", h[b:b + 1], e0[b:b + 1], gens[b:b + 1])
        torch.testing.assert_close(alone[0][0], together[0][b], rtol=0, atol=0)
