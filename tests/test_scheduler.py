"""`Scheduler` (omni_core/engine/scheduler.py): requests wait in arrival order and are admitted while
fewer than max_batch run; cancelled and over-budget requests are named with their reason; remove
takes a request out wherever it is."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from omni_core import SpeechRequest
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence


def seq(name: str = "hi") -> Sequence:
    return Sequence(SpeechRequest(name), [], torch.device("cpu"), torch.float32, threading.Event())


def test_admission_is_fifo_up_to_max_batch():
    sched = Scheduler(max_batch=2)
    a, b, c = seq("a"), seq("b"), seq("c")
    for s in (a, b, c):
        sched.add(s)
    assert sched.active == 3 and sched.running == []
    assert sched.admit() == [a, b] and sched.running == [a, b] and list(sched.waiting) == [c]
    assert sched.admit() == []  # full
    sched.remove(a)
    assert sched.admit() == [c] and sched.running == [b, c] and sched.active == 2


def test_interrupted_names_cancelled_and_over_budget_requests_running_or_waiting():
    sched = Scheduler(max_batch=1, time_budget_s=5.0)
    running, waiting, fine = seq(), seq(), seq()
    for s in (running, fine, waiting):
        sched.add(s)
    sched.admit()
    assert sched.interrupted() == []
    running.cancel.set()
    waiting.t0 = time.perf_counter() - 10  # taken in 10 s ago
    assert sched.interrupted() == [(running, "cancelled"), (waiting, "time_budget")]
    assert any("5 s time budget" in w for w in waiting.stats.warnings)
    sched.time_budget_s = None
    assert sched.interrupted() == [(running, "cancelled")]  # no budget: only the cancel


def test_remove_takes_a_request_out_wherever_it_is():
    sched = Scheduler(max_batch=1)
    a, b = seq(), seq()
    sched.add(a), sched.add(b)
    sched.admit()
    sched.remove(b)
    assert list(sched.waiting) == [] and sched.running == [a]
    sched.remove(a)
    sched.remove(a)  # twice: nothing happens
    assert sched.active == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_batch_must_be_a_whole_number_of_at_least_one(bad):
    with pytest.raises(ValueError, match="max_batch must be a whole number of at least 1"):
        Scheduler(max_batch=bad)
