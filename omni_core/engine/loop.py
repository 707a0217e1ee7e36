"""`Engine`: one thread, one loop, every running request advanced in the same step.

`Engine.step()` reads as one sentence: schedule (stop, admit) → think (one batched
thinker token for every chat reply the talker is about to read) → talk (one batched
talker step) → CB0 per row → one predictor call per predictor kind for all rows →
emit each row's frame and audio.

All torch work happens in the engine's own thread: callers (Gradio's worker threads)
only put requests in and read events out. Torch kernels run on the threads of the
thread that calls them, and a second thread's OpenMP team fights the first's (measured
~3x slower on 2 cores); one long-lived thread runs at full speed.

Time is charged per stage: every request in a batched call waited for all of it, so each
is charged the whole call. A request that fails (a bad prompt, its codec push) fails alone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future

import torch

from omni_core.engine import output
from omni_core.engine.runner import Runner
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, model: SpeechModel, max_batch: int = 16, time_budget_s: float | None = None):
        self.scheduler = Scheduler(max_batch, time_budget_s)
        self.runner = Runner(model)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # lists of new Sequences, (fn, args, Future) calls
        self.steps_taken = 0
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def model(self) -> SpeechModel:
        return self.runner.model

    @model.setter
    def model(self, model: SpeechModel) -> None:
        self.runner = Runner(model)

    @property
    def max_batch(self) -> int:
        return self.scheduler.max_batch

    @property
    def active(self) -> int:
        return self.scheduler.active

    # ---- the callers' side -----------------------------------------------------------------

    def submit(self, *seqs: Sequence) -> None:
        """Hand requests to the engine; requests submitted in one call are taken in at the same step."""
        self._ensure_thread()
        self.inbox.put(list(seqs))

    def call(self, fn, *args):
        """Run fn(*args) in the engine's thread between steps and return its result (or raise)."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        self._ensure_thread()
        future: Future = Future()
        self.inbox.put((fn, args, future))
        return future.result()

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="omni-engine", daemon=True)
                self._thread.start()

    # ---- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        with torch.no_grad():
            while True:
                self._drain(block=not self.scheduler.active)
                if self.scheduler.active:
                    try:
                        self.step()
                    except Exception as exc:  # a bug in a batched call: fail those rows, keep serving
                        log.exception("engine step failed")
                        for seq in list(self.scheduler.running):
                            self._fail(seq, exc)

    def _drain(self, block: bool) -> None:
        """Take in everything the callers sent; wait for the first item when idle."""
        while True:
            try:
                item = self.inbox.get(block=block)
            except queue.Empty:
                return
            block = False
            if isinstance(item, list):
                for seq in item:
                    self.scheduler.add(seq)
            else:
                fn, args, future = item
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)

    def step(self) -> None:
        running = self.scheduler.running
        for seq in running:
            seq.step_spent = dict.fromkeys(seq.step_spent, 0.0)
        self.schedule()
        self.think([s for s in running if s.wants_token()])
        rows = self.talk([s for s in running if s.can_talk])
        rows, cb0 = self.choose_cb0(rows)
        predicted = self.predict(rows, cb0)
        self.emit(rows, cb0, predicted)
        self.steps_taken += 1

    # ---- the parts of a step ---------------------------------------------------------------

    def schedule(self) -> None:
        """Stop what was cancelled or ran out of time; admit waiting requests up to max_batch."""
        for seq, reason in self.scheduler.interrupted():
            self._finish(seq, reason)
        for seq in self.scheduler.admit():
            # Chat admission is the thinker's prefill; speak mode's is the talker's prompt pieces.
            self._guard(seq, "thinker" if seq.req.mode == "chat" else "talker", [seq], self.runner.admit, seq)

    def think(self, seqs: list[Sequence]) -> None:
        """One reply token for each chat request that needs one: one batched thinker step."""
        if not seqs:
            return
        t = time.perf_counter()
        logits = self.runner.think(seqs)
        self._charge("thinker", seqs, t)
        for b, seq in enumerate(seqs):
            self._guard(seq, "thinker", [seq], self.runner.take_token, seq, logits[b:b + 1])

    def talk(self, seqs: list[Sequence]) -> list[Sequence]:
        """The talker's hidden state for each row's next frame: a prefill for a request starting,
        one batched step (ragged cache lengths) for the rest."""
        for seq in [s for s in seqs if not s.talking]:
            self._guard(seq, "talker", [seq], self.runner.start_talker, seq)
        going = [s for s in seqs if s.talking and s.hidden is None]
        inputs = {s: self._guard(s, "talker", [s], self.runner.next_input, s) for s in going}
        going = [s for s in going if not s.finished]
        if going:
            t = time.perf_counter()
            self.runner.talk(torch.cat([inputs[s] for s in going]), going)  # [B, 1, C]
            self._charge("talker", going, t)
        return [s for s in seqs if s.talking and not s.finished]

    def choose_cb0(self, seqs: list[Sequence]):
        """CB0 for every row (one codec-head matmul), each with its own settings and generator;
        a row that chose codec EOS ends here."""
        if not seqs:
            return [], {}
        t = time.perf_counter()
        logits = self.runner.cb0_logits(seqs)  # [B, V]
        cb0 = {s: self.runner.next_cb0(s, logits[b:b + 1]) for b, s in enumerate(seqs)}
        self._charge("talker", seqs, t)
        for seq in seqs:
            if int(cb0[seq][0]) == self.model.codec_eos:
                self._finish(seq, "eos")
        return [s for s in seqs if not s.finished], cb0

    def predict(self, seqs: list[Sequence], cb0: dict) -> dict:
        if not seqs:
            return {}
        t = time.perf_counter()
        out = self.runner.predict(seqs, cb0)
        self._charge("predictor", seqs, t)
        return out

    def emit(self, seqs: list[Sequence], cb0: dict, predicted: dict) -> None:
        """Each row's Frame and audio; a row at its frame limit finishes."""
        for seq in seqs:
            main = "kv" if seq.req.predictor == "kv" else "reprefill"
            other = predicted[seq, "kv"][0] if seq.req.predictor == "compare" else None
            talker_ms, predictor_ms = (1000 * seq.step_spent[k] for k in ("talker", "predictor"))
            self._guard(seq, "codec", [], output.add_frame, seq, *cb0[seq], predicted[seq, main], other,
                        talker_ms, predictor_ms, len(seqs), self.model)
            seq.hidden = None
            if not seq.finished and len(seq.codes) >= seq.max_frames():
                self._finish(seq, "max_frames")

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _charge(self, stage: str, seqs: list[Sequence], since: float) -> None:
        """Every request in a batched call waited for all of it: each is charged the whole time."""
        seconds = time.perf_counter() - since
        for seq in seqs:
            seq.spent[stage] += seconds
            seq.step_spent[stage] += seconds

    def _guard(self, seq: Sequence, stage: str, charged: list[Sequence], fn, *args):
        """Run one request's own work; if it raises, that request fails alone."""
        t = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:
            self._fail(seq, exc)
        finally:
            if charged:
                self._charge(stage, charged, t)

    def _finish(self, seq: Sequence, reason: str) -> None:
        self.scheduler.remove(seq)
        try:
            output.finish(seq, reason, self.model)
        except Exception as exc:  # its last codec push
            output.fail(seq, exc)

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        if not seq.finished:
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
            self.scheduler.remove(seq)
            output.fail(seq, exc)
