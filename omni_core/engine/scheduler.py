"""`Scheduler`: who runs. Requests wait in arrival order and are admitted while fewer than
`max_batch` run. At each step boundary a request is stopped when it is cancelled, out of
time (counted from its admission), or stalled; a running request whose reader has fallen
more than `max_unread` frames behind is paused (it keeps its slot and its caches, but its
row leaves the batch until the reader catches up)."""

from __future__ import annotations

import math
from collections import deque

from omni_core.engine.sequence import Sequence

MAX_UNREAD = 250  # frames (20 s of audio) made and not yet read before a request is paused
STALL_S = 60.0  # seconds a paused request may wait for its reader before it is stopped


class Scheduler:
    def __init__(self, max_batch: int = 16, time_budget_s: float | None = None, max_waiting: int | None = None,
                 max_unread: int = MAX_UNREAD, stall_s: float = STALL_S):
        self.max_batch = whole("max_batch", max_batch, 1)
        self.max_waiting = 4 * max_batch if max_waiting is None else whole("max_waiting", max_waiting, 0)
        self.max_unread = whole("max_unread", max_unread, 1)
        self.time_budget_s = time_budget_s
        self.stall_s = positive_seconds("stall_s", stall_s)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def time_budget_s(self) -> float | None:
        return self._time_budget_s

    @time_budget_s.setter
    def time_budget_s(self, seconds: float | None) -> None:
        self._time_budget_s = None if seconds is None else positive_seconds("time_budget_s", seconds)

    @property
    def active(self) -> int:
        """Requests taken in and not finished."""
        return len(self.running) + len(self.waiting)

    @property
    def idle(self) -> bool:
        """Nothing a step could advance: every running request is paused or waits for its caller's text, and
        none can be admitted."""
        return all(s.paused or s.awaiting_text for s in self.running) and \
            not (self.waiting and len(self.running) < self.max_batch)

    def rows(self) -> list[Sequence]:
        """The running requests that take part in this step (the paused ones do not)."""
        return [s for s in self.running if not s.paused]

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def stop_reason(self, seq: Sequence, now: float) -> str | None:
        """Why `seq` stops now (cancelled, time_budget, stalled), or None; pauses or resumes it
        by how far its reader is behind."""
        if seq.cancel.is_set():
            return "cancelled"
        if seq.admitted_at is None:
            return None  # waiting: the budget has not started
        if self.time_budget_s is not None and now - seq.admitted_at > self.time_budget_s:
            seq.stats.warnings.append(f"stopped after the {self.time_budget_s:g} s time budget")
            return "time_budget"
        if seq.unread <= self.max_unread:
            seq.paused_since = None
        elif seq.paused_since is None:
            seq.paused_since = now
        elif now - seq.paused_since > self.stall_s:
            seq.stats.warnings.append(f"stopped: {seq.unread} frames were not read for {self.stall_s:g} s")
            return "stalled"
        return None

    def done_reason(self, seq: Sequence, codec_eos: int, cb0: int | None = None) -> str | None:
        """Why `seq` ends within the step, or None: its reply ended before it could be spoken ("eos",
        checked before its talker starts), the talker chose codec EOS as this frame's CB0 ("eos"), or
        it made its last frame ("max_frames")."""
        if seq.talker_cache is None and seq.reply.done and not seq.reply.spoken:
            seq.stats.warnings.append("the reply ended at its first token: there is nothing to speak")
            return "eos"
        if cb0 is not None and cb0 == codec_eos:
            return "eos"
        if len(seq.codes) >= seq.max_frames():
            return "max_frames"
        return None

    def admit(self, now: float) -> list[Sequence]:
        """Move waiting requests to running, up to max_batch; the newly admitted."""
        admitted = []
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting.popleft()
            seq.admitted_at = now
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)


def whole(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number of at least {low}, got {value!r}")
    return value


def positive_seconds(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)
