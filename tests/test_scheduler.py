"""`Scheduler` (omni_core/engine/scheduler.py): requests wait in arrival order and are admitted while
fewer than max_batch run; cancelled and over-budget requests are named with their reason; remove
takes a request out wherever it is."""

from __future__ import annotations

import threading

import pytest
import torch

from omni_core import SpeechRequest
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence


def seq(name: str = "hi") -> Sequence:
    return Sequence(SpeechRequest(name), [], torch.device("cpu"), torch.float32, threading.Event())


def test_admission_is_fifo_up_to_max_batch_and_starts_the_clock():
    sched = Scheduler(max_batch=2)
    a, b, c = seq("a"), seq("b"), seq("c")
    for s in (a, b, c):
        sched.add(s)
    assert sched.active == 3 and sched.running == []
    assert sched.admit(10.0) == [a, b] and sched.running == [a, b] and list(sched.waiting) == [c]
    assert a.admitted_at == b.admitted_at == 10.0 and c.admitted_at is None
    assert sched.admit(11.0) == []  # full
    sched.remove(a)
    assert sched.admit(12.0) == [c] and sched.running == [b, c] and sched.active == 2 and c.admitted_at == 12.0


def test_stop_reasons_cancelled_over_budget_from_admission_and_waiting_never_over_budget():
    sched = Scheduler(max_batch=1, time_budget_s=5.0)
    running, waiting = seq(), seq()
    sched.add(running), sched.add(waiting)
    sched.admit(100.0)
    assert sched.stop_reason(running, 104.0) is None
    assert sched.stop_reason(waiting, 1000.0) is None  # waiting: its budget has not started
    assert sched.stop_reason(running, 106.0) == "time_budget"
    assert any("5 s time budget" in w for w in running.stats.warnings)
    waiting.cancel.set()
    assert sched.stop_reason(waiting, 1000.0) == "cancelled"  # a waiting request can be cancelled
    sched.time_budget_s = None
    assert sched.stop_reason(running, 10_000.0) is None  # no budget


def test_a_reader_far_behind_is_paused_then_stopped_when_it_stays_away():
    sched = Scheduler(max_batch=1, max_unread=3, stall_s=60.0)
    s = seq()
    sched.add(s), sched.admit(0.0)
    s.codes = [None] * 5  # five frames made, none read
    assert sched.stop_reason(s, 1.0) is None and s.paused and sched.rows() == [] and sched.idle
    assert sched.stop_reason(s, 30.0) is None
    assert sched.stop_reason(s, 62.0) == "stalled"


def test_remove_takes_a_request_out_wherever_it_is():
    sched = Scheduler(max_batch=1)
    a, b = seq(), seq()
    sched.add(a), sched.add(b)
    sched.admit(0.0)
    sched.remove(b)
    assert list(sched.waiting) == [] and sched.running == [a]
    sched.remove(a)
    sched.remove(a)  # twice: nothing happens
    assert sched.active == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_max_batch_must_be_a_whole_number_of_at_least_one(bad):
    with pytest.raises(ValueError, match="max_batch must be a whole number of at least 1"):
        Scheduler(max_batch=bad)


def test_done_reasons_nothing_to_speak_codec_eos_and_the_last_frame():
    from types import SimpleNamespace

    sched, EOS = Scheduler(), 2150
    s = Sequence(SpeechRequest("hi", max_frames=2), [], torch.device("cpu"), torch.float32)
    s.reply = SimpleNamespace(done=True, spoken=[])  # the thinker ended its reply at once
    assert sched.done_reason(s, EOS) == "eos" and "nothing to speak" in s.stats.warnings[-1]
    s.talker_cache = object()  # talking: that check is only before its talker starts
    assert sched.done_reason(s, EOS) is None and sched.done_reason(s, EOS, cb0=7) is None
    assert sched.done_reason(s, EOS, cb0=EOS) == "eos"
    s.codes = [[0] * 16, [0] * 16]
    assert sched.done_reason(s, EOS) == "max_frames"
