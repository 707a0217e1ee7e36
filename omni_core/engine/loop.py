"""`Engine`: one thread, one loop, every running request advanced in the same step.

Each turn of the loop drives one `Step` (engine/step.py: its stages, in order) over the scheduler's rows;
requests and calls come in through the inbox between steps.

All torch work happens in the engine's own thread: callers (Gradio's worker threads) only put requests in and
read events out. Torch kernels run on an OpenMP team per calling thread, and a second living team makes every
team's kernels wait for sleeping workers (engine/threads.py: a lone tiny request 1.5x slower), so the engine's
thread is the only one with kernels to run, and on a CPU it ends when it has been idle for 30 s or is asked to
rest (a later request starts another): idle pipelines keep no team alive.

Faults: a request's own work and a batched call that raises fail only their rows (engine/guard.py). An exception
that escapes a step fails the rows it held; a second in a row, or the thread dying, takes the engine down: every
request it holds, and every later call, gets `EngineError`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future, wait
from functools import partial

import torch

from omni_core.engine.codec_pool import CodecPool
from omni_core.engine.guard import Guard
from omni_core.engine.output import EngineError
from omni_core.engine.runner import Runner
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel
from omni_core.engine.step import Step
from omni_core.engine.threads import ENGINES, idle_exit_s
from omni_core.errors import EngineBusy

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often a waiting caller checks that the engine is alive
PAUSED_POLL_S = 0.02  # how often an engine whose requests are all paused looks again
CLOSE = object()  # the inbox item that ends the loop
REST = object()  # the inbox item that wakes the loop to end an idle thread (`Engine.rest`)
WAKE = object()  # the inbox item that only wakes the loop: audio came back from a codec process, or text came
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
        self.guard = Guard(self.scheduler, self._left_line)
        self.stepper = Step(self.scheduler, Runner(model), self.guard, self._left_line)
        self._rest = False  # end the thread as soon as it is idle (`rest`)
        # lists of new Sequences, (fn, args, Future) calls, WAKE (audio came back: `CodecPool.deliver`; text came)
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.wake = partial(self.inbox.put, WAKE)  # audio came back (CodecPool), text came (TextFeed): look again
        self._start_codec()
        self.gather_s = (GATHER_S, GATHER_MAX_S)  # how an idle engine waits for the rest of a burst
        self.error: EngineError | None = None  # set once the engine no longer serves
        self._queued = 0  # submitted and not yet admitted: in the inbox or the scheduler's waiting line
        self._failed_steps = 0  # steps in a row that raised
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards error, _queued, _thread and putting requests in the inbox
        ENGINES.add(self)

    @property
    def runner(self) -> Runner | None:
        """The only caller of the models (None once the engine is closed)."""
        return self.stepper.runner

    @runner.setter
    def runner(self, runner: Runner | None) -> None:
        self.stepper.runner = runner

    @property
    def model(self) -> SpeechModel:
        return self.runner.model

    @model.setter
    def model(self, model: SpeechModel) -> None:
        old, self.runner = self.runner, Runner(model)
        if old is not None:
            old.codec.close()
        self._start_codec()

    def _start_codec(self) -> None:
        """The engine's codec processes, when it has them (else its runner decodes in the engine's thread). One
        that ends fails the streams it held; the pool starts another in its place for later requests."""
        if self.codec_threads:
            try:
                self.runner.codec = CodecPool(self.model.code2wav, self.codec_threads, self.codec_processes,
                                              wake=self.wake)
            except (OSError, RuntimeError) as exc:  # no room in shared memory, no processes allowed
                log.warning("the audio is decoded in the engine's thread: %s", exc)
                self.codec_threads = None

    max_batch = property(lambda self: self.scheduler.max_batch)
    max_waiting = property(lambda self: self.scheduler.max_waiting)
    active = property(lambda self: self.scheduler.active)

    @property
    def has_thread(self) -> bool:
        """Whether the engine's thread is running now (on a CPU it ends after IDLE_EXIT_S with nothing to do)."""
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
            if self.runner is not None:
                self.runner.codec.close()
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
                    idle_wait = 0 if self._rest else idle_exit_s(self.model.device)
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
            self.stepper.run()
            self._failed_steps = 0
        except Exception as exc:
            log.exception("engine step failed")
            self._failed_steps += 1
            if self._failed_steps >= 2:
                raise EngineError(f"two engine steps in a row failed; the last: {type(exc).__name__}: {exc}") from exc
            for seq in list(self.scheduler.running):
                self.guard.fail(seq, exc)

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
        codec = self.runner.codec
        if codec.busy:  # audio still to come for requests that have ended: their Done follows it
            codec.wait_for(codec.mark())
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
                self.runner.codec.deliver()  # audio that came back from the codec processes, to its requests
                return taken
            block, taken = False, taken + 1
            if item is CLOSE:
                return None
            if item is REST or item is WAKE:  # it only woke the loop
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
        """Fail every request held or still in the inbox, and every pending call, with `error`; the ended
        requests' audio still out in the codec processes is handed over first."""
        codec = self.runner.codec
        codec.wait_for(codec.mark())
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
            self.guard.fail(seq, EngineError(str(error)))

    def _left_line(self, n: int) -> None:
        """n requests left the waiting line (admitted, or ended while waiting)."""
        with self._lock:
            self._queued -= n
