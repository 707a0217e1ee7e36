"""`Scheduler`: who runs. Requests wait in arrival order and are admitted while fewer than
`max_batch` run; a request is stopped at a step boundary when it is cancelled or out of
time, and removed when it finishes or fails."""

from __future__ import annotations

from collections import deque

from omni_core.engine.sequence import Sequence


class Scheduler:
    def __init__(self, max_batch: int = 16, time_budget_s: float | None = None):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a whole number of at least 1, got {max_batch!r}")
        self.max_batch, self.time_budget_s = max_batch, time_budget_s
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def active(self) -> int:
        """Requests taken in and not finished."""
        return len(self.running) + len(self.waiting)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def interrupted(self) -> list[tuple[Sequence, str]]:
        """The requests to stop now, and why (cancelled, time budget)."""
        stops = []
        for seq in list(self.running) + list(self.waiting):
            if (reason := seq.interrupted(self.time_budget_s)) is not None:
                stops.append((seq, reason))
        return stops

    def admit(self) -> list[Sequence]:
        """Move waiting requests to running, up to max_batch; the newly admitted."""
        admitted = []
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting.popleft()
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
