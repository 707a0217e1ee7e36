"""The engine: one thread, one loop, every running request advanced in the same step.

`Engine.step()` reads as one sentence: schedule (admit, stop) → think (one batched
thinker token for every chat reply the talker is about to read) → talk (one batched
talker step) → CB0 per row → one predictor call per predictor kind for all rows →
emit each row's frame and audio.

All torch work happens in the engine's own thread: callers (Gradio's worker threads)
only put requests in and read events out. Torch kernels run on the threads of the
thread that calls them, and a second thread's OpenMP team fights the first's (measured
~3x slower on 2 cores); one long-lived thread runs at full speed.

A request's floats do not depend on its neighbours: matmul rows are batch-invariant
(`layers.linear`), attention is per row, sampling per row from the request's own
generators. A request that fails (a bad prompt, its codec push) fails alone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future

import torch

from .parts import Parts
from .sequence import Sequence

log = logging.getLogger(__name__)


class Engine:
    def __init__(self, parts: Parts, max_batch: int = 16, time_budget_s: float | None = None):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a whole number of at least 1, got {max_batch!r}")
        self.parts, self.max_batch, self.time_budget_s = parts, max_batch, time_budget_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # new Sequences and (fn, args, Future) calls
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.steps = 0  # steps taken (tests, stats)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    # ---- the callers' side -----------------------------------------------------------------

    def submit(self, seq: Sequence) -> None:
        self._ensure_thread()
        self.inbox.put(seq)

    def call(self, fn, *args):
        """Run fn(*args) in the engine's thread between steps and return its result (or raise)."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        self._ensure_thread()
        future: Future = Future()
        self.inbox.put((fn, args, future))
        return future.result()

    @property
    def active(self) -> int:
        """Requests taken in and not finished."""
        return len(self.running) + len(self.waiting)

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="omni-engine", daemon=True)
                self._thread.start()

    # ---- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        with torch.no_grad():
            while True:
                self._drain(block=not self.running and not self.waiting)
                if self.running or self.waiting:
                    try:
                        self.step()
                    except Exception as exc:  # a bug in a batched call: fail those rows, keep serving
                        log.exception("engine step failed")
                        for seq in list(self.running):
                            self._fail(seq, exc)

    def _drain(self, block: bool) -> None:
        """Take in everything the callers sent; wait for the first item when idle."""
        while True:
            try:
                item = self.inbox.get(block=block)
            except queue.Empty:
                return
            block = False
            if isinstance(item, Sequence):
                self.waiting.append(item)
            else:
                fn, args, future = item
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)

    def step(self) -> None:
        for seq in self.running:
            seq.step_spent = dict.fromkeys(seq.step_spent, 0.0)
        self.schedule()
        self.think([s for s in self.running if s.wants_token()])
        rows = self.talk([s for s in self.running if s.can_talk])
        rows, cb0 = self.choose_cb0(rows)
        predicted = self.predict(rows, cb0)
        self.emit(rows, cb0, predicted)
        self.steps += 1

    # ---- the parts of a step ---------------------------------------------------------------

    def schedule(self) -> None:
        """Stop what was cancelled or ran out of time; admit waiting requests up to max_batch."""
        for seq in list(self.running) + list(self.waiting):
            if (reason := seq.interrupted(self.time_budget_s)) is not None:
                self._finish(seq, reason)
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting.popleft()
            self.running.append(seq)
            # Chat admission is the thinker's prefill; speak mode's is the talker's prompt pieces.
            self._guard(seq, "thinker" if seq.req.mode == "chat" else "talker", [seq], seq.admit)

    def think(self, seqs: list[Sequence]) -> None:
        """One reply token for each chat request that needs one: one batched thinker step."""
        if not seqs:
            return
        thinker = self.parts.thinker
        ids = torch.cat([s.last_token for s in seqs])  # [B]
        logits = self._timed("thinker", seqs, thinker.decode_rows, ids, [s.thinker_cache for s in seqs])
        for b, seq in enumerate(seqs):
            self._guard(seq, "thinker", [seq], seq.take_token, logits[b:b + 1])

    def talk(self, seqs: list[Sequence]) -> list[Sequence]:
        """The talker's hidden state for each row's next frame: a prefill for a request starting,
        one batched step (ragged cache lengths) for the rest."""
        starting = [s for s in seqs if not s.talking]
        going = [s for s in seqs if s.talking and s.hidden is None]
        for seq in starting:
            self._guard(seq, "talker", [seq], seq.start_talker)
        inputs = {s: self._guard(s, "talker", [s], s.next_input) for s in going}
        going = [s for s in going if not s.finished]
        if going:
            x = torch.cat([inputs[s] for s in going])  # [B, 1, C]
            t = time.perf_counter()
            hidden = self.parts.talker.model.decode_rows(x, [s.talker_cache for s in going])
            self._charge("talker", going, t)
            for b, seq in enumerate(going):
                seq.hidden = hidden[b:b + 1, -1]
        return [s for s in seqs if s.talking and not s.finished]

    def choose_cb0(self, seqs: list[Sequence]):
        """CB0 for every row (one codec-head matmul), each with its own settings and generator;
        a row that chose codec EOS ends here."""
        if not seqs:
            return [], {}
        t = time.perf_counter()
        logits = self.parts.talker.codec_head(torch.cat([s.hidden for s in seqs]))  # [B, V]
        cb0 = {s: s.next_cb0(logits[b:b + 1]) for b, s in enumerate(seqs)}
        self._charge("talker", seqs, t)
        eos = self.parts.config.codec_ids["codec_eos_token_id"]
        for seq in seqs:
            if int(cb0[seq][0]) == eos:
                self._finish(seq, "eos")
        return [s for s in seqs if not s.finished], cb0

    def predict(self, seqs: list[Sequence], cb0: dict) -> dict:
        """CB1..CB15 for every row: one call per predictor kind (compare-mode rows are in both)."""
        out: dict = {}
        if not seqs:
            return out
        t = time.perf_counter()
        preds = self.parts.predictors
        for kind in ("reprefill", "kv"):
            for graph in (False, True):
                rows = [s for s in seqs if kind in wanted(s.req.predictor)
                        and preds.uses_graph(kind, s.req.cuda_graph) == graph]
                if not rows:
                    continue
                h = torch.cat([s.hidden for s in rows])  # [B, C]
                e0 = self.parts.talker.model.codec_embedding(torch.cat([cb0[s][0] for s in rows]))
                gens = [s.gen_predictor[kind] if s.req.do_sample else None for s in rows]
                made = preds.run(kind, h, e0, gens, use_graph=graph)  # codes, probs, embeds, top codes, top probs
                for b, seq in enumerate(rows):
                    seq.stats.cuda_graph |= graph
                    out[seq, kind] = tuple(x[b:b + 1] for x in made)
        self._charge("predictor", seqs, t)
        return out

    def emit(self, seqs: list[Sequence], cb0: dict, predicted: dict) -> None:
        """Each row's Frame and audio; a row at its frame limit finishes."""
        for seq in seqs:
            main = "kv" if seq.req.predictor == "kv" else "reprefill"
            other = predicted[seq, "kv"][0] if seq.req.predictor == "compare" else None
            talker_ms, predictor_ms = (1000 * seq.step_spent[k] for k in ("talker", "predictor"))
            self._guard(seq, "codec", [], seq.add_frame, *cb0[seq], predicted[seq, main], other, talker_ms,
                        predictor_ms, len(seqs))
            seq.hidden = None
            if not seq.finished and len(seq.codes) >= seq.max_frames():
                self._finish(seq, "max_frames")

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _timed(self, stage: str, seqs: list[Sequence], fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self._charge(stage, seqs, t)
        return out

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
        self._remove(seq)
        try:
            seq.finish(reason)
        except Exception as exc:  # its last codec push
            seq.fail(exc)

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        if not seq.finished:
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
            self._remove(seq)
            seq.fail(exc)

    def _remove(self, seq: Sequence) -> None:
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)


def wanted(predictor: str) -> tuple[str, ...]:
    """The predictor kinds a request's frames need."""
    return {"reprefill": ("reprefill",), "kv": ("kv",), "compare": ("reprefill", "kv")}[predictor]
