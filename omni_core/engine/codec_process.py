"""`CodecProcess`: the codec streams decoded in a process of their own, beside the engine's next step.

On a CPU the codec is a large share of a batched step (docs/benchmarks-history.md (p)). A thread cannot
run it beside the step: both need the GIL between the tiny model's short ops, and a compiled frame holds
it for the whole call (measured: little saved eager, nothing compiled; history (p)). A process has an
interpreter of its own. The engine sends each step's due chunks (a few hundred bytes of
codes) and goes on with the next step while the process decodes them on its own kernel threads; a thread
of the engine's process (`_receive`) takes each chunk's audio as it comes and queues it for the engine's
thread, which hands it to its request (`CodecPool.deliver`): no other thread writes a request's state.
vLLM-Omni runs its stages as processes for the same reason.

A stream's state lives in the process; the engine holds a `RemoteStream` (its key and position:
engine/codec_stream.py). The
process decodes with the same modules and `push_together`, so a stream's audio is bit for bit what the
engine's thread would give it with the same number of kernel threads (tests/test_codec_process.py).
The codec's weights reach the process through shared memory (torch.multiprocessing), not as a copy.

Messages, in order on one pipe each way: engine → process `("open", key, num_codebooks, prefix codes)`,
`("push", tag, [(key, codes [Q, n], last)])`, `("drop", key)` (a request that failed: its stream goes),
`None` (end); process → engine `("audio", tag, [(wav [s] | None, error | None)], seconds)`. A failed push
fails its streams alone (each is tried alone after a failed group); the process dying fails every chunk
still out, and a new process serves later requests (engine/codec_pool.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time

import numpy as np
import torch
import torch.multiprocessing as mp

from omni_core.codec import backend, batching
from omni_core.codec.streaming import StreamingDecoder, push_together
from omni_core.engine.codec_stream import RemoteStream

SHM = "/dev/shm"
# The codec runs a step behind the engine, whose step is every request's critical path: on a CPU it yields
# the cores to the engine's thread while that thread runs, and takes them while the engine waits (two codec
# processes at the engine's priority beside it are three busy processes on two cores: engine/codec_pool.py).
NICE = 5
STALL_S = 120.0  # pushes out and nothing back for this long: the process is hung (killed, its pushes fail)

log = logging.getLogger(__name__)


class CodecProcessError(RuntimeError):
    """The codec process ended (killed, out of memory) or could not start: the streams it held are lost."""


class CodecProcess:
    def __init__(self, codec: torch.nn.Module, threads: int, hand_back=None):
        """hand_back(callback, results, seconds): how the receiving thread hands a push's results on (the
        pool's: queued for the engine's thread, engine/codec_pool.py); None: callback(results, seconds) there."""
        if next(codec.parameters()).device.type != "cpu":
            raise ValueError("the codec runs in a process of its own only on a CPU")
        _check_shared_memory(codec)
        self.codec = codec
        self._hand_back = hand_back or (lambda callback, results, seconds: callback(results, seconds))
        self.error: CodecProcessError | None = None
        self._next_key = 0
        self._callbacks: dict[int, object] = {}  # tag → fn(results, seconds) for each push still out
        self._next_tag = 0
        self._heard_at = time.monotonic()  # when the process last sent audio back
        self._lock = threading.Condition()  # guards the above, error and the pipe's sending end
        ctx = mp.get_context("spawn")  # fork would copy the engine's threads and OpenMP state
        to_child, self._send_end = ctx.Pipe(duplex=False)
        self._recv_end, from_child = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_serve, args=(codec, threads, to_child, from_child),
                                    name="omni-codec", daemon=True)
        self._process.start()
        to_child.close(), from_child.close()  # the child's ends: EOF here once it exits
        self._receiver = threading.Thread(target=self._receive, name="omni-codec-receiver", daemon=True)
        self._receiver.start()

    @property
    def alive(self) -> bool:
        return self.error is None

    @property
    def outstanding(self) -> int:
        """Pushes sent whose audio has not come back."""
        with self._lock:
            return len(self._callbacks)

    def open(self, num_codebooks: int | None, prefix: np.ndarray | None = None) -> RemoteStream:
        """A new stream; prefix [Q, n]: codes decoded first whose audio is not wanted (a clone's reference)."""
        with self._lock:
            key, self._next_key = self._next_key, self._next_key + 1
            self._send(("open", key, num_codebooks, prefix))
        return RemoteStream(self, key, num_codebooks, 0 if prefix is None else prefix.shape[1])

    def push(self, items: list[tuple[RemoteStream, np.ndarray, bool]], callback) -> None:
        """Decode chunks [Q, n] of these streams in one codec call (equal n and position; `codec_groups`).
        last: the stream ends after it. callback(results, seconds) gets (wav [s] | None, error | None) per item,
        in order, and the process's seconds for the call, through `hand_back` (results None: the process ended)."""
        with self._lock:
            tag, self._next_tag = self._next_tag, self._next_tag + 1
            self._callbacks[tag] = callback
            try:
                self._send(("push", tag, [(s.key, codes, last) for s, codes, last in items]))
            except BaseException:
                del self._callbacks[tag]
                raise
        for stream, codes, _ in items:
            stream.num_frames += codes.shape[1]

    def drop(self, stream: RemoteStream) -> None:
        """Forget a stream that will not get its last chunk (its request failed): its state in the process goes."""
        with self._lock:
            if self.error is None:
                try:
                    self._send(("drop", stream.key))
                except CodecProcessError:  # the process is gone, and the stream with it
                    pass

    @property
    def next_tag(self) -> int:
        """The tag the next push gets (pushes are tagged in the order they are sent)."""
        with self._lock:
            return self._next_tag

    def wait_for(self, tag: int) -> None:
        """Wait until every push tagged before `tag` is back (or the process has ended). A process that sends
        nothing back for STALL_S while pushes are out is taken for hung and ended: those pushes fail."""
        with self._lock:
            while not self._lock.wait_for(lambda: self.error is not None or all(t >= tag for t in self._callbacks),
                                          STALL_S):
                if self._heard_at < time.monotonic() - STALL_S:
                    log.error("the codec process sent nothing back for %.0f s: ending it", STALL_S)
                    self._process.kill()

    def close(self, timeout: float = 10.0) -> None:
        """End the process once it has decoded what was sent; chunks still out after `timeout` fail."""
        with self._lock:
            if self.error is None:
                try:
                    self._send_end.send(None)
                except OSError:
                    pass
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout)
        self._receiver.join(timeout)

    def _send(self, message) -> None:
        """Under the lock: one message to the process (raises CodecProcessError once it has ended)."""
        if self.error is not None:
            raise self.error
        try:
            self._send_end.send(message)
        except OSError as exc:
            raise self._ended(f"the codec process is gone ({exc})") from exc

    def _receive(self) -> None:
        """The receiving thread: each push's audio to `hand_back`, until the process ends."""
        try:
            while True:
                _, tag, results, seconds = self._recv_end.recv()
                with self._lock:
                    callback, self._heard_at = self._callbacks[tag], time.monotonic()
                try:
                    self._hand_back(callback, results, seconds)
                except Exception:  # a bug in a callback must not end the thread that serves every stream
                    log.exception("handing a chunk's audio back failed")
                with self._lock:
                    del self._callbacks[tag]
                    self._lock.notify_all()
        except (EOFError, OSError):
            pass
        self._process.join(1.0)
        self._ended(f"the codec process ended (exit code {self._process.exitcode})")
        with self._lock:
            lost = list(self._callbacks.values())
        for callback in lost:  # handed back before they stop counting as out (`outstanding`), as a push is
            self._hand_back(callback, None, 0.0)  # None: every chunk of that push is lost (`error` says why)
        with self._lock:
            self._callbacks = {}
            self._lock.notify_all()

    def _ended(self, why: str) -> CodecProcessError:
        with self._lock:
            if self.error is None:
                self.error = CodecProcessError(why)
            return self.error


def _check_shared_memory(codec: torch.nn.Module) -> None:
    """The weights go to the process through /dev/shm (Linux), often small in a container (64 MiB by default
    in Docker); a full one would kill a process when a page is touched, so refuse before (OSError)."""
    if not os.path.isdir(SHM):
        return
    need = sum(t.numel() * t.element_size() for t in itertools.chain(codec.parameters(), codec.buffers())
               if not t.is_shared())
    free = shutil.disk_usage(SHM).free
    if free < 2 * need:
        raise OSError(f"{SHM} has {free / 2**20:.0f} MiB free and the codec's weights need {need / 2**20:.0f} "
                      f"MiB there (twice that is required)")


def _serve(codec: torch.nn.Module, threads: int, inbox, outbox) -> None:
    """The codec process: open streams, decode pushes in order, until the engine sends None or goes away."""
    torch.set_num_threads(threads)
    if backend.runs_batched(codec):  # checked at load at the engine's thread count: again at this one
        batching.decide(codec)
    streams: dict[int, StreamingDecoder] = {}
    with torch.no_grad():
        _warm_up(codec)
        os.nice(NICE)  # only once ready: the start (imports, warm-up) should not queue behind other work
        while True:
            try:
                message = inbox.recv()
            except EOFError:
                return
            if message is None:
                return
            if message[0] == "drop":
                streams.pop(message[1], None)
                continue
            if message[0] == "open":
                _, key, num_codebooks, prefix = message
                streams[key] = StreamingDecoder(codec, num_codebooks)
                if prefix is not None:
                    streams[key].push(torch.from_numpy(prefix)[None])
                continue
            _, tag, items = message
            t = time.perf_counter()
            results = _decode(streams, items)
            outbox.send(("audio", tag, results, time.perf_counter() - t))
            for key, _, last in items:
                if last:
                    streams.pop(key, None)


def _warm_up(codec: torch.nn.Module) -> None:
    """One throwaway frame before serving: a process's first decode pays its kernels' first calls (81 ms
    against 15 ms later for the tiny codec's first chunk), which should not fall on a request's first audio."""
    try:
        StreamingDecoder(codec).push(torch.zeros(1, codec.cfg.num_quantizers, 1, dtype=torch.long))
    except Exception:  # a codec that cannot decode zeros fails on the requests' own chunks, with their error
        log.exception("the codec process's warm-up decode failed")


def _decode(streams: dict[int, StreamingDecoder], items: list) -> list[tuple]:
    """One codec call for the group; if it raises, each stream alone (a healthy one gets the bits the group
    would have given it), so only a stream that fails alone fails. A failed stream is dropped."""
    keys = [key for key, _, _ in items]
    if len(items) == 1 and keys[0] not in streams:
        return [(None, "an earlier chunk of this stream failed")]
    if all(key in streams for key in keys):
        try:
            wavs = push_together([streams[key] for key in keys], [torch.from_numpy(c)[None] for _, c, _ in items])
            return [(w[0, 0].float().numpy(), None) for w in wavs]
        except Exception as exc:
            if len(items) == 1:
                streams.pop(keys[0], None)
                return [(None, f"{type(exc).__name__}: {exc}")]
    return [_decode(streams, [item])[0] for item in items]
