"""Compiling while serving: a compiled pipeline that decodes eagerly until its units are ready.

A first start compiles its units for minutes (a Space restarts on a fresh disk: every start is a first one).
`compile_in_background(pipe)` takes the compiled predictor and decode steps off the pipeline, so its engine
decodes eagerly at once, and builds or loads the units in a thread of its own (dynamo traces and the C++
compiler runs there; the engine's thread keeps serving). When every unit is ready they go back on, between two
steps with no request in flight: a request decodes wholly eagerly or wholly compiled, never half of each.

Where eager and compiled give the same codes (the tiny model in float32: tests/test_compiled.py) a visitor hears
the same take before and after, only faster. At real widths they do not (BENCHMARKS.md, "Compiled start-up"): each
request is still decoded wholly by one of the two, so it equals its own solo run on that path, but the same request
sent before and after the take-over may get another take.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import torch

IDLE_POLL_S = 0.05  # how often the builder looks for a moment with no request in flight


class BackgroundCompile:
    """The builder thread of `compile_in_background`: `ready` is set once the units decode; `error` holds what
    stopped the build (the pipeline then stays eager)."""

    def __init__(self, pipe, report: Callable[[str], None]):
        self.pipe, self.report = pipe, report
        self.predictor, self.steps = pipe.predictors.compiled, list(pipe.steps)
        self.ready, self.error = threading.Event(), None
        pipe.predictors.compiled = None  # eager until the units are ready
        for steps in self.steps:
            steps.stack.rows_step = None
        self.thread = threading.Thread(target=self._build, name="omni-compile", daemon=True)
        self.thread.start()

    @property
    def state(self) -> str:
        return "ready" if self.ready.is_set() else "failed" if self.error else "compiling"

    def _build(self) -> None:
        started = time.perf_counter()
        try:
            torch.set_num_threads(self.pipe.engine.threads)  # a unit is built for its kernel threads (packages.key)
            rows = self.pipe.engine.max_batch
            pieces = [*(self.predictor.pieces(rows) if self.predictor else []),
                      *(piece for steps in self.steps for piece in steps.pieces(rows))]
            self.report(f"compiling {len(pieces)} pieces in the background (requests decode eagerly meanwhile)")
            for i, piece in enumerate(pieces, 1):
                with torch.no_grad():
                    piece(lambda message, i=i: self.report(f"[{i}/{len(pieces)}] {message}"))
            while not self.pipe.engine.call(self._take_over):  # between two steps, none in flight
                time.sleep(IDLE_POLL_S)
        except Exception as exc:  # noqa: BLE001 (a failed build leaves an eager pipeline that works)
            self.error = exc
            self.report(f"compiling failed ({type(exc).__name__}: {exc}); decoding stays eager")
            return
        self.report(f"compiled decoding from now on: ready {time.perf_counter() - started:.0f} s after the start")

    def _take_over(self) -> bool:
        """In the engine's thread: the units go on if no request is decoding (True), else nothing (False)."""
        if self.pipe.engine.scheduler.running:
            return False
        self.pipe.predictors.compiled = self.predictor
        for steps in self.steps:
            steps.stack.rows_step = steps
        self.ready.set()
        return True


def compile_in_background(pipe, report: Callable[[str], None] | None = None) -> BackgroundCompile:
    """Serve `pipe` (loaded with compile=True) eagerly now and compiled once its units are built or loaded."""
    return BackgroundCompile(pipe, report or (lambda message: None))
