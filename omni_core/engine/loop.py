"""`Engine`: one thread, one loop, every running request advanced in the same step.

`Engine.step()` reads as one sentence: schedule (stop, pause, admit) → prefill newcomers'
prompts → think (one batched thinker token for every chat reply the talker is about to
read) → a frame for every row (`frame`): talk (prefill talker prompts, one batched talker
step) → CB0 for every row (rows alike as one batch) → one predictor call per predictor kind
for all rows → emit each row's frame and audio. Rows still waiting for their first frame take
that part first, in calls of their own, so a newcomer's first audio does not wait for the older
rows' whole step. With codec processes (`codec_threads`, `codec_processes`), emit sends the
chunks' codes and their audio comes back while the next step runs (engine/codec_process.py,
engine/codec_pool.py); the engine stays at most one step ahead of them.

Prefills run piece by piece (`Runner.prefill_chunk` positions); while some row is decoding, a
step runs at most `prefill_budget` prompt positions (whole pieces, in admission order; one piece
per prompt, at least one piece), so a long prompt admitted mid-stream delays the others' next
frame by one piece's work, not its whole prompt's, and a handful of short prompts arriving
together all start in one step. With nothing decoding (requests arriving together at an idle
engine) every piece runs.

All torch work happens in the engine's own thread: callers (Gradio's worker threads)
only put requests in and read events out. Torch kernels run on an OpenMP team per
calling thread, and a second living team makes every team's kernels wait for sleeping
workers (engine/threads.py: a lone tiny request 1.5x slower), so the engine's thread is the
only one with kernels to run, and it ends when it has been idle for 30 s or is asked to rest
(a later request starts another): idle pipelines keep no team alive.

Time is charged per stage: every request in a batched call waited for all of it, so each
is charged the whole call.

Faults: what a request brings (its stop checks, prompt, sampling, codec push) runs under
its own guard and fails it alone. A batched call that raises is run again one row at a
time (rows are batch-invariant, so a healthy row gets the floats it got in the batch) and
only the rows that fail alone fail. An exception that escapes a step fails the rows it
held; a second in a row, or the thread dying, takes the engine down: every request it
holds, and every later call, gets `EngineError`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, wait

import torch

from omni_core.engine import output
from omni_core.engine.codec_pool import CodecPool
from omni_core.engine.output import EngineError
from omni_core.engine.runner import Runner
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel
from omni_core.engine.threads import ENGINES, IDLE_EXIT_S
from omni_core.errors import EngineBusy

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting caller checks that the engine is alive
PAUSED_POLL_S = 0.02  # how often an engine whose requests are all paused looks again
CLOSE = object()  # the inbox item that ends the loop
REST = object()  # the inbox item that wakes the loop to end an idle thread (`Engine.rest`)
# Prompt positions a step may prefill while rows are decoding, one piece per prompt: four pieces. One piece
# (128) let only two of the tiny model's ~60-position prompts start per step, so 8 requests arriving beside
# a speaking one heard their first audio over four steps.
PREFILL_BUDGET = 512
# An idle engine handed a request waits while more keep coming: up to GATHER_S for each next one, GATHER_MAX_S
# in all. Requests sent together (threads released at once submit over 2-9 ms here, slowed by the engine's
# own step) then start in one step, instead of the first few alone and the rest a whole step later.
GATHER_S, GATHER_MAX_S = 0.002, 0.02


class Engine:
    def __init__(self, model: SpeechModel, max_batch: int = 16, threads: int | None = None,
                 codec_threads: int | None = None, codec_processes: int = 1, **options):
        """threads: the kernel threads of the engine's thread (None: as many as the creating thread has).
        codec_threads: decode the audio in a process of its own with this many kernel threads, beside the
        engine's next step (engine/codec_process.py; CPU only); None: in the engine's thread, in its step.
        codec_processes: with codec_threads, this many such processes, the streams spread over them
        (engine/codec_pool.py: a step's chunks decode in parallel).
        options: Scheduler's (time_budget_s, max_waiting, max_unread, stall_s)."""
        self.scheduler = Scheduler(max_batch, **options)
        self.threads = threads or torch.get_num_threads()
        self.codec_threads, self.codec_processes = codec_threads, codec_processes
        self._codec_mark: dict = {}  # where the codec processes' pushes stood when the current step began
        self.runner = Runner(model)
        self._codec_pool()
        self._rest = False  # end the thread as soon as it is idle (`rest`)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()  # lists of new Sequences, (fn, args, Future) calls
        self.steps_taken = 0
        self.prefill_budget = PREFILL_BUDGET  # prompt positions a step may prefill while rows decode
        self.gather_s = (GATHER_S, GATHER_MAX_S)  # how an idle engine waits for the rest of a burst
        self.prefill_left: int | None = None  # prompt positions this step may still prefill (None: no limit)
        self.error: EngineError | None = None  # set once the engine no longer serves
        self._queued = 0  # submitted and not yet admitted: in the inbox or the scheduler's waiting line
        self._failed_steps = 0  # steps in a row that raised
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards error, _queued, _thread and putting requests in the inbox
        ENGINES.add(self)

    @property
    def model(self) -> SpeechModel:
        return self.runner.model

    @model.setter
    def model(self, model: SpeechModel) -> None:
        old, self.runner = self.runner, Runner(model)
        if old is not None and old.codec_pool is not None:
            old.codec_pool.close()
        self._codec_pool()

    def _codec_pool(self) -> CodecPool | None:
        """The engine's codec processes (when it has them). One that ends fails the streams it held; the
        pool starts another in its place for later requests (`CodecPool.open`)."""
        pool = self.runner.codec_pool
        if self.codec_threads and pool is None:
            try:
                pool = CodecPool(self.model.code2wav, self.codec_threads, self.codec_processes)
            except (OSError, RuntimeError) as exc:  # no room in shared memory, no processes allowed
                log.warning("the audio is decoded in the engine's thread: %s", exc)
                self.codec_threads = pool = None
            self.runner.codec_pool = pool
        return pool

    @property
    def max_batch(self) -> int:
        return self.scheduler.max_batch

    @property
    def max_waiting(self) -> int:
        return self.scheduler.max_waiting

    @property
    def active(self) -> int:
        return self.scheduler.active

    @property
    def has_thread(self) -> bool:
        """Whether the engine's thread is running now (it ends after IDLE_EXIT_S with nothing to do)."""
        with self._lock:
            return self._thread is not None and self._thread.is_alive()  # a closed engine's ended

    # ---- the callers' side -----------------------------------------------------------------

    def submit(self, *seqs: Sequence) -> None:
        """Hand requests to the engine; requests submitted in one call are taken in at the same step.
        Raises EngineBusy (a RequestError) when more than max_waiting would wait, EngineError when the engine is down."""
        with self._lock:
            self._raise_if_down()
            if self._queued + len(seqs) > self.max_waiting:
                raise EngineBusy(f"the engine is busy: {self._queued} requests are waiting (at most "
                                   f"{self.max_waiting}) beside {self.max_batch} running; try again shortly")
            self._queued += len(seqs)
            self._start_thread()
            now = time.perf_counter()
            for seq in seqs:
                seq.submitted_at = now
            self.inbox.put(list(seqs))

    def call(self, fn, *args):
        """Run fn(*args) in the engine's thread between steps and return its result (or raise)."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        future: Future = Future()
        with self._lock:
            self._raise_if_down()
            self._start_thread()
            self.inbox.put((fn, args, future))
        while not wait([future], timeout=POLL_S).done:
            self.check_alive()
        return future.result()

    def rest(self) -> None:
        """End the engine's thread as soon as it has nothing to do (its OpenMP team goes with it:
        engine/threads.py); the next request or call starts another."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._rest = True
                self.inbox.put(REST)

    def check_alive(self) -> None:
        """Raise EngineError if the engine cannot serve any more (callers poll this while they wait)."""
        with self._lock:
            self._raise_if_down()

    def close(self, timeout: float = 30.0) -> None:
        """Fail what the engine holds with EngineError, end its thread, let go of the model."""
        with self._lock:
            if self.error is None:
                self.error = EngineError("the pipeline is closed")
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self.inbox.put(CLOSE)
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            if self.runner is not None and self.runner.codec_pool is not None:
                self.runner.codec_pool.close()
            self.runner = None  # the weights' last reference from the engine

    def _raise_if_down(self) -> None:
        if self.error is None and self._thread is not None and not self._thread.is_alive():
            self.error = EngineError("the engine thread has died")
        if self.error is not None:
            raise EngineError(str(self.error))

    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="omni-engine", daemon=True)
            self._thread.start()

    # ---- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)  # OpenMP's thread count is the calling thread's own
        try:
            with torch.no_grad():
                while True:
                    waiting = not self.scheduler.active
                    idle_wait = 0 if self._rest else IDLE_EXIT_S
                    taken = self._drain(idle_wait if waiting else PAUSED_POLL_S if self.scheduler.idle else 0)
                    if taken is None:
                        break
                    if waiting and self.scheduler.active and not self._gather():  # closed while gathering
                        break
                    if self.scheduler.active:
                        self._step_or_count()
                    elif waiting and (self._rest or not taken) and self._let_thread_go():
                        return
            self._go_down(EngineError("the pipeline is closed"))
        except EngineError as exc:
            self._go_down(exc)
        except BaseException as exc:  # the loop itself broke: nobody may wait for it
            log.exception("the engine thread died")
            self._go_down(EngineError(f"the engine thread died: {type(exc).__name__}: {exc}"))

    def _step_or_count(self) -> None:
        """One step; an exception that escapes it fails its rows, a second in a row takes the engine down."""
        try:
            self.step()
            self._failed_steps = 0
        except Exception as exc:
            log.exception("engine step failed")
            self._failed_steps += 1
            if self._failed_steps >= 2:
                raise EngineError(f"two engine steps in a row failed; the last: {type(exc).__name__}: {exc}") from exc
            for seq in list(self.scheduler.running):
                self._fail(seq, exc)

    def _gather(self) -> bool:
        """Take in requests while they keep coming (GATHER_S after the last, GATHER_MAX_S in all), so that a
        burst starts in one step. → False once the engine is asked to close."""
        deadline = time.perf_counter() + self.gather_s[1]
        while time.perf_counter() < deadline:
            taken = self._drain(self.gather_s[0])
            if taken is None:
                return False
            if not taken:
                break
        return True

    def _let_thread_go(self) -> bool:
        """End this idle thread (its OpenMP team goes with it), unless something came in meanwhile:
        the next submit or call starts a new one."""
        with self._lock:
            if not self.inbox.empty():
                return False
            self._thread, self._rest = None, False
            return True

    def _drain(self, timeout: float) -> int | None:
        """Take in everything the callers sent, waiting up to `timeout` for the first item.
        → how many items were taken; None once the engine is asked to close."""
        block, taken = timeout != 0, 0
        while True:
            try:
                item = self.inbox.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                return taken
            block, taken = False, taken + 1
            if item is CLOSE:
                return None
            if item is REST:  # it only woke the loop
                continue
            if isinstance(item, list):
                for seq in item:
                    self.scheduler.add(seq)
            else:
                fn, args, future = item
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:
                    future.set_exception(exc)

    def _go_down(self, error: EngineError) -> None:
        """Fail every request held or still in the inbox, and every pending call, with `error`."""
        with self._lock:
            self.error = self.error or error
            error = self.error
        held = list(self.scheduler.running) + list(self.scheduler.waiting)
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, list):
                held += item
            elif isinstance(item, tuple):
                item[2].set_exception(EngineError(str(error)))
        for seq in held:
            self._fail(seq, EngineError(str(error)))

    def step(self) -> None:
        for seq in self.scheduler.running:
            seq.step_spent = dict.fromkeys(seq.step_spent, 0.0)
        codec = self._codec_pool()
        # A step's audio may still decode while the next step runs, no longer: pushes from steps before it wait
        self._codec_mark = codec.mark() if codec is not None else {}
        self.schedule()
        rows = self.scheduler.rows()
        decoding = any(s.decoding for s in rows)
        # The budget holds at least one piece, so a prompt always advances.
        self.prefill_left = max(self.prefill_budget, self.runner.prefill_chunk) if decoding else None
        self.prefill([s for s in rows if s.thinker_todo is not None], "thinker")
        self.think([s for s in rows if s.wants_token()])
        talking = [s for s in rows if s.can_talk]
        # Newcomers first, in calls of their own: their first frame and audio come out before the older rows'
        # step, not after it (rows are batch-invariant: the split changes no row's floats).
        for group in ([s for s in talking if not s.codes], [s for s in talking if s.codes]):
            if group:
                self.frame(group)
        self.steps_taken += 1

    def frame(self, seqs: list[Sequence]) -> None:
        """The next frame of each of these rows: talker, CB0, predictor, then its Frame and audio."""
        rows = self.talk(seqs)
        rows, cb0 = self.choose_cb0(rows)
        rows, predicted = self.predict(rows, cb0)
        self.emit(rows, cb0, predicted)

    # ---- the parts of a step ---------------------------------------------------------------

    def schedule(self) -> None:
        """Stop what was cancelled, ran out of time or stalled; pause slow readers; admit waiting
        requests up to max_batch. Each request's checks run under its own guard."""
        now = time.perf_counter()
        for seq in list(self.scheduler.running) + list(self.scheduler.waiting):
            if seq.codec_error is not None:  # a chunk of its audio failed in the codec process
                self._fail(seq, seq.codec_error)
                continue
            reason = self._guard(seq, "talker", [], self.scheduler.stop_reason, seq, now)
            if reason is not None:
                self._finish(seq, reason)
        admitted = self.scheduler.admit(now)
        with self._lock:
            self._queued -= len(admitted)
        for seq in admitted:
            # Chat admission is the thinker's prompt; speak mode's is the talker's prompt pieces.
            self._guard(seq, "thinker" if seq.req.mode == "chat" else "talker", [seq], self.runner.admit, seq)

    def prefill(self, seqs: list[Sequence], stage: str) -> None:
        """The next pieces of these requests' prompts for `stage` ("thinker" or "talker"), request by request
        in admission order, while the step's budget (`prefill_left`) lasts, one piece per request when the
        budget applies (so a long prompt holds the speaking rows one piece's work a step, and a burst of
        short ones starts together). Each piece is its request's own work (fails it alone); a request whose
        last piece ran can decode in this same step."""
        run = self.runner.prefill_thinker if stage == "thinker" else self.runner.prefill_talker
        for seq in seqs:
            while not seq.finished and (todo := _todo(seq, stage)) is not None:
                piece = min(self.runner.prefill_chunk, todo.shape[1])
                if self.prefill_left is not None:
                    if piece > self.prefill_left:
                        return
                    self.prefill_left -= piece
                self._guard(seq, stage, [seq], run, seq)
                if self.prefill_left is not None:
                    break  # beside decoding rows a prompt runs one piece a step: the budget is for several prompts

    def think(self, seqs: list[Sequence]) -> None:
        """One reply token for each chat request that needs one: one batched thinker step."""
        seqs, logits = self._batched("thinker", seqs, self.runner.think)
        for seq, row in zip(seqs, logits):
            self._guard(seq, "thinker", [seq], self.runner.take_token, seq, row)

    def talk(self, seqs: list[Sequence]) -> list[Sequence]:
        """The talker's hidden state for each row's next frame: the prompt's prefill for a request
        starting (as the budget allows), one batched step (ragged cache lengths) for the rest."""
        for seq in [s for s in seqs if s.talker_cache is None]:
            if seq.reply.done and not seq.reply.spoken:  # the thinker ended its reply at once
                seq.stats.warnings.append("the reply ended at its first token: there is nothing to speak")
                self._finish(seq, "eos")
                continue
            self._guard(seq, "talker", [seq], self.runner.start_talker, seq)
        self.prefill([s for s in seqs if s.talker_todo is not None and not s.finished], "talker")
        going, hidden = self._batched("talker", [s for s in seqs if s.talking and s.hidden is None], self.runner.talk)
        for seq, h in zip(going, hidden):
            seq.hidden = h
        return [s for s in seqs if s.talking and not s.finished]

    def choose_cb0(self, seqs: list[Sequence]):
        """CB0 for every row (one codec-head matmul), each with its own settings and generator;
        a row that chose codec EOS ends here."""
        seqs, chosen = self._batched("talker", seqs, self.runner.choose_cb0)
        cb0 = dict(zip(seqs, chosen))
        for seq in seqs:
            if not seq.finished and int(cb0[seq][0]) == self.model.codec_eos:
                self._finish(seq, "eos")
        return [s for s in seqs if not s.finished], cb0

    def predict(self, seqs: list[Sequence], cb0: dict) -> tuple[list[Sequence], dict]:
        """CB1..CB15: one call per predictor kind (and graph or not) for all its rows."""
        out: dict = {}
        for kind, graph, rows in self.runner.predictor_groups(seqs):
            rows, made = self._batched("predictor", rows, lambda r: self.runner.predict(kind, graph, r, cb0))
            out.update({(s, kind): m for s, m in zip(rows, made)})
        return [s for s in seqs if not s.finished], out

    def emit(self, seqs: list[Sequence], cb0: dict, predicted: dict) -> None:
        """Each row's Frame; then the audio of the rows whose next chunk is due, one codec call per group
        of equal position and chunk length (newcomers' first audio first); a row at its frame limit
        finishes."""
        for seq in seqs:
            main = "kv" if seq.req.predictor == "kv" else "reprefill"
            other = predicted[seq, "kv"][0] if seq.req.predictor == "compare" else None
            talker_ms, predictor_ms = (1000 * seq.step_spent[k] for k in ("talker", "predictor"))
            self._guard(seq, "codec", [], output.add_frame, seq, *cb0[seq], predicted[seq, main], other,
                        talker_ms, predictor_ms, len(seqs), self.model)
            seq.hidden = None
        due = [s for s in seqs if not s.finished and output.audio_due(s)]
        codec, firsts = self.runner.codec_pool, any(s.chunks_sent == 0 for s in due)
        if due and codec is not None:  # the codec keeps at most one step behind
            codec.wait_for(self._codec_mark)
        for group in output.codec_groups(due):
            self._batched("codec", group, lambda rows: output.decode(rows, self.model))
        if firsts and codec is not None:
            # A first chunk is waited for, as the engine's thread would decode it: its audio is handed over while
            # the engine waits, not after the next compiled call (which holds the GIL): lone tiny, compiled, the
            # first audio came 18 ms later without this.
            codec.wait_for(codec.mark())
        for seq in seqs:
            if not seq.finished and len(seq.codes) >= seq.max_frames():
                self._finish(seq, "max_frames")

    # ---- bookkeeping ---------------------------------------------------------------------------

    def _batched(self, stage: str, seqs: list[Sequence], call) -> tuple[list[Sequence], list]:
        """call(rows) → one result per row, for all `seqs` at once. If it raises, each row runs
        alone: rows are batch-invariant, so a healthy row gets the floats the batch would have
        given it, and only a row that fails alone fails. → (the rows that succeeded, their results)."""
        if not seqs:
            return [], []
        t = time.perf_counter()
        try:
            results = call(seqs)
            self._charge(stage, seqs, t)
            return seqs, results
        except Exception as exc:
            self._charge(stage, seqs, t)
            if len(seqs) == 1:
                self._fail(seqs[0], exc)
                return [], []
            log.warning("a batched %s call of %d rows failed (%s: %s); running its rows one at a time",
                        stage, len(seqs), type(exc).__name__, exc)
        alone = {s: self._guard(s, stage, [s], call, [s]) for s in seqs}
        ok = [s for s in seqs if not s.finished]
        return ok, [alone[s][0] for s in ok]

    def _charge(self, stage: str, seqs: list[Sequence], since: float) -> None:
        """Every request in a batched call waited for all of it: each is charged the whole time."""
        seconds = time.perf_counter() - since
        for seq in seqs:
            seq.spent[stage] += seconds
            seq.step_spent[stage] += seconds

    def _guard(self, seq: Sequence, stage: str, charged: list[Sequence], fn, *args):
        """Run one request's own work; if it raises, that request fails alone (returns None)."""
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
            output.finish(seq, reason, self.model)
        except Exception as exc:  # its last codec push
            output.fail(seq, exc)

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        if not seq.finished:
            log.warning("request failed: %s: %s", type(exc).__name__, exc)
            self._remove(seq)
            output.fail(seq, exc)

    def _remove(self, seq: Sequence) -> None:
        if seq.admitted_at is None:  # it ends while waiting: one fewer in the line
            with self._lock:
                self._queued -= 1
        self.scheduler.remove(seq)


def _todo(seq: Sequence, stage: str) -> torch.Tensor | None:
    """The prompt positions `stage` has yet to prefill for this request (None: none)."""
    return seq.thinker_todo if stage == "thinker" else seq.talker_todo
