"""`Guard`: fault isolation and time charging for the calls of a step.

What a request brings (its stop checks, prompt, sampling, codec push) runs under its own guard
(`run`) and fails it alone. A batched call that raises is run again one row at a time (rows are
batch-invariant, so a healthy row gets the floats it got in the batch) and only the rows that
fail alone fail (`batched`).

Time is charged per stage: every request in a batched call waited for all of it, so each is
charged the whole call.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from omni_core.engine import output
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence

log = logging.getLogger(__name__)


class Guard:
    def __init__(self, scheduler: Scheduler, left_line: Callable[[int], None]):
        """left_line(n): n requests left the waiting line without being admitted (the engine counts them)."""
        self.scheduler = scheduler
        self.left_line = left_line

    def batched(self, stage: str, seqs: list[Sequence], call, charge: bool = True) -> tuple[list[Sequence], list]:
        """call(rows) → one result per row, for all `seqs` at once. If it raises, each row runs
        alone: rows are batch-invariant, so a healthy row gets the floats the batch would have
        given it, and only a row that fails alone fails. → (the rows that succeeded, their results).
        charge=False: the call charges its own time (the codec's: output.py)."""
        if not seqs:
            return [], []
        t = time.perf_counter()
        charged = seqs if charge else []
        try:
            results = call(seqs)
            self.charge(stage, charged, t)
            return seqs, results
        except Exception as exc:
            self.charge(stage, charged, t)
            if len(seqs) == 1:
                self.fail(seqs[0], exc)
                return [], []
            log.warning("a batched %s call of %d rows failed (%s: %s); running its rows one at a time",
                        stage, len(seqs), type(exc).__name__, exc)
        alone = {s: self.run(s, stage, [s] if charge else [], call, [s]) for s in seqs}
        ok = [s for s in seqs if not s.finished]
        return ok, [alone[s][0] for s in ok]

    def new_step(self, seqs: list[Sequence]) -> None:
        """A step begins: its own seconds (Frame.talker_ms, ...) count from zero."""
        for seq in seqs:
            seq.step_spent = dict.fromkeys(seq.step_spent, 0.0)

    def charge(self, stage: str, seqs: list[Sequence], since: float) -> None:
        """Every request in a batched call waited for all of it: each is charged the whole time."""
        seconds = time.perf_counter() - since
        for seq in seqs:
            seq.spent[stage] += seconds
            seq.step_spent[stage] += seconds

    def run(self, seq: Sequence, stage: str, charged: list[Sequence], fn, *args):
        """Run one request's own work; if it raises, that request fails alone (returns None)."""
        t = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:
            self.fail(seq, exc)
        finally:
            if charged:
                self.charge(stage, charged, t)

    def fail(self, seq: Sequence, exc: BaseException) -> None:
        """The request ends with `exc` (its stream raises it); nothing when it has already ended."""
        if not seq.finished:
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
            self.remove(seq)
            output.fail(seq, exc)

    def remove(self, seq: Sequence) -> None:
        """The request leaves the scheduler (and the waiting line, when it ends there)."""
        if seq.admitted_at is None:  # it ends while waiting: one fewer in the line
            self.left_line(1)
        self.scheduler.remove(seq)
