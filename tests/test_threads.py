"""Where kernels run (omni_core/engine/threads.py): loading in a thread that ends, an engine thread
that ends when idle (after IDLE_EXIT_S, or at once after `rest`) and comes back for the next request
with the same kernel threads, and no threads left behind by a pipeline that loaded and served."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from omni_core.engine.threads import in_passing_thread, rest_engines
from omni_core.pipeline import load_pipeline
from omni_core.request import SpeechRequest

needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")


def os_threads() -> int:
    """Every thread of this process, OpenMP workers included (Python's count misses those)."""
    return len(os.listdir("/proc/self/task"))


def settles_to(limit: int, timeout: float = 3.0) -> int:
    """The process's thread count once it is at most `limit` (threads that were told to end take a
    moment), or what it is after `timeout`."""
    end = time.monotonic() + timeout
    while os_threads() > limit and time.monotonic() < end:
        time.sleep(0.05)
    return os_threads()


def test_in_passing_thread_returns_raises_and_ends():
    seen = {}

    def job(x, *, y):
        seen["thread"], seen["threads"] = threading.current_thread(), torch.get_num_threads()
        return x + y

    assert in_passing_thread(2, job, 1, y=2) == 3
    assert seen["thread"] is not threading.current_thread() and not seen["thread"].is_alive()
    assert seen["threads"] == 2
    with pytest.raises(ZeroDivisionError):
        in_passing_thread(1, lambda: 1 / 0)


@needs_proc
def test_loading_leaves_the_calling_thread_without_kernel_threads():
    """A thread that loads a pipeline with 2 kernel threads and stays alive adds itself and nothing
    else: had the weights loaded in it, its OpenMP team (one more thread) would live as long as it."""
    loaded, release, box = threading.Event(), threading.Event(), {}

    def caller():
        box["pipe"] = load_pipeline("tiny", device="cpu", threads=2)
        loaded.set()
        release.wait()

    rest_engines()  # earlier tests' engine threads end first: only this test's threads come and go
    before = settles_to(0, timeout=1.0)
    thread = threading.Thread(target=caller)
    thread.start()
    try:
        assert loaded.wait(120)
        assert settles_to(before + 1) == before + 1
    finally:
        release.set()
        thread.join()
        box["pipe"].close()


class Ops(TorchDispatchMode):
    """Every torch op dispatched in the thread that entered it (a dispatch mode is the thread's own)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("source", ["tiny", "tiny-tts"])
def test_load_pipeline_runs_no_torch_op_in_the_callers_thread(source):
    """Not one op, not only no team: the tiny widths start no OpenMP team where the real ones do (at 0.6B
    the Qwen3-TTS prompt pieces' text projection did, in the caller's thread: its team then throttled the
    engine's: a lone 0.6B request 5.77 against 7.51 frames/s, BENCHMARKS.md "First audio on two cores")."""
    with Ops() as seen:
        pipe = load_pipeline(source, device="cpu", max_batch=2)
    try:
        assert seen.ops == []
    finally:
        pipe.close()


@needs_proc
def test_a_rested_engine_thread_ends_and_the_next_request_starts_one_with_the_same_kernel_threads():
    request = SpeechRequest("The engine comes back.", max_frames=4)
    rest_engines()
    with load_pipeline("tiny", device="cpu", threads=2) as pipe:
        before = pipe.generate(request)
        assert pipe.call(torch.get_num_threads) == 2
        serving = os_threads()
        assert pipe.engine.has_thread
        rest_engines()
        assert not pipe.engine.has_thread
        assert settles_to(serving - 2) <= serving - 2, "the engine thread or its OpenMP worker stayed"
        after = pipe.generate(request)  # a new engine thread
        assert pipe.call(torch.get_num_threads) == 2
        np.testing.assert_array_equal(after.codes, before.codes)
        np.testing.assert_array_equal(after.audio, before.audio)


def test_an_engine_asked_to_rest_while_serving_finishes_its_requests_first():
    with load_pipeline("tiny", device="cpu") as pipe:
        stream = pipe.stream(SpeechRequest("Still speaking when asked to rest.", max_frames=12))
        next(iter(stream))
        pipe.engine.rest()
        events = list(stream)
        assert stream.result is not None and stream.result.stats.frames == 12, events[-1:]
        rest_engines(timeout=10)
        assert not pipe.engine.has_thread


def test_an_idle_engine_thread_ends_by_itself(monkeypatch):
    from omni_core.engine import threads
    monkeypatch.setattr(threads, "IDLE_EXIT_S", 0.2)
    with load_pipeline("tiny", device="cpu") as pipe:
        pipe.generate(SpeechRequest("Then nothing.", max_frames=2))
        end = time.monotonic() + 10
        while pipe.engine.has_thread:
            assert time.monotonic() < end, "the idle engine thread did not end"
            time.sleep(0.05)
        assert pipe.generate(SpeechRequest("And again.", max_frames=2)).stats.frames == 2


def test_rest_engines_waits_only_for_engines_that_can_rest():
    """A closed engine has no thread to wait for, and one that holds a request (its reader stopped
    reading) cannot rest: neither holds up the caller."""
    closed = load_pipeline("tiny", device="cpu")
    closed.generate(SpeechRequest("Closed after this.", max_frames=2))
    closed.close()
    assert not closed.engine.has_thread
    with load_pipeline("tiny", device="cpu", max_unread=1) as busy:
        stream = busy.stream(SpeechRequest("Nobody reads me to the end.", max_frames=400))
        next(iter(stream))
        start = time.monotonic()
        rest_engines(timeout=20)
        assert time.monotonic() - start < 10
        assert busy.engine.active == 1 and busy.engine.has_thread
        stream.close()


EXIT_WITHOUT_CLOSING = """
from omni_core.pipeline import load_pipeline
from omni_core.request import SpeechRequest
load_pipeline("tiny", device="cpu").generate(SpeechRequest("Exit without closing.", max_frames=2))
"""


def test_a_process_that_never_closes_its_pipeline_exits_cleanly():
    """The engine's daemon thread is ended at exit; left to Python's finalization it aborted the
    process in 2 of 3 runs ("terminate called without an active exception")."""
    root = Path(__file__).resolve().parents[1]
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", EXIT_WITHOUT_CLOSING], capture_output=True, text=True,
                              timeout=300, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]


def test_an_engine_thread_ends_when_idle_on_a_cpu_only(monkeypatch):
    """On a CPU an idle thread ends (its OpenMP team with it); on a GPU it waits for the next request, whose
    first CUDA calls would cost more in a new thread (the waiting itself: test_cuda_graph.py)."""
    import torch

    from omni_core.engine import threads
    monkeypatch.setattr(threads, "IDLE_EXIT_S", 0.2)
    assert threads.idle_exit_s(torch.device("cpu")) == 0.2
    assert threads.idle_exit_s(torch.device("cuda")) is None
