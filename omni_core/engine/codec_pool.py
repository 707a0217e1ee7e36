"""`CodecPool`: the codec streams spread over several codec processes, so that their chunks decode in parallel.

One codec process decodes a group's chunks in one call, row by row where the codec runs so (codec/backend.py: a
row's audio may not depend on its neighbours), so 8 newcomers' first chunks took it 18 ms on one core while the
engine's thread waited for them (a first chunk is waited for: engine/loop.py `emit`). With two processes each decodes half
of them at once. A stream lives in one process (its state is there), given round robin as streams open; a
`codec_groups` group is cut by process, and each part is one push. A stream's audio is its own decode's in
any process (tests/test_codec_process.py).

A process that ends fails its own streams alone (their requests get the CodecProcessError); the next
stream to open finds a new process in its place (or, if none can start, opens in one still alive).
"""

from __future__ import annotations

import logging
import queue

import torch

from omni_core.engine.codec_process import CodecProcess, CodecProcessError
from omni_core.engine.codec_stream import RemoteStream

log = logging.getLogger(__name__)


class CodecPool:
    def __init__(self, codec: torch.nn.Module, threads: int, processes: int = 1, wake=lambda: None):
        """processes: how many codec processes, each with `threads` kernel threads. wake(): called when audio
        has come back (the engine's: its loop takes it in, `deliver`, even while it has nothing else to do)."""
        self.codec, self.threads, self.wake = codec, threads, wake
        self.received: queue.SimpleQueue = queue.SimpleQueue()  # (callback, results, seconds) not yet delivered
        self.members: list[CodecProcess] = []
        try:
            for _ in range(processes):
                self.members.append(CodecProcess(codec, threads, self._hand_back))
        except BaseException:
            self.close()
            raise
        self.opened = 0  # streams opened: the next one opens in member opened % len(members)

    def open(self, prefix: torch.Tensor | None = None) -> RemoteStream:
        """A new stream in the next member, round robin. One that has ended is replaced first; if no new process
        can start (no room in shared memory), the stream opens in a member still alive (raises if none is)."""
        turn, self.opened = self.opened % len(self.members), self.opened + 1
        member = self.members[turn]
        if not member.alive:
            member.close()
            try:
                member = self.members[turn] = CodecProcess(self.codec, self.threads, self._hand_back)
            except (OSError, RuntimeError) as exc:
                alive = [m for m in self.members if m.alive]
                if not alive:
                    raise CodecProcessError(f"no codec process is left, and a new one cannot start: {exc}") from exc
                log.warning("a codec process ended and a new one cannot start (%s): %d left", exc, len(alive))
                member = alive[0]
        return member.open(None, None if prefix is None else prefix.cpu().numpy())

    def mark(self) -> dict[CodecProcess, int]:
        """Where every member's pushes stand now: `wait_for` it waits for every push sent before."""
        return {member: member.next_tag for member in self.members}

    def wait_for(self, mark: dict[CodecProcess, int]) -> None:
        """Wait until every push sent before `mark` is back, and hand the audio over (`deliver`)."""
        for member, tag in mark.items():
            member.wait_for(tag)
        self.deliver()

    def deliver(self) -> None:
        """In the engine's thread: hand the audio that came back to its requests, in the order it came."""
        while True:
            try:
                callback, results, seconds = self.received.get_nowait()
            except queue.Empty:
                return
            try:
                callback(results, seconds)
            except Exception:  # one request's bad hand-over must not stop the others'
                log.exception("handing a chunk's audio back failed")

    @property
    def busy(self) -> bool:
        """Pushes out, or audio back and not yet handed over (the engine's thread waits before it ends)."""
        return any(member.outstanding for member in self.members) or not self.received.empty()

    def _hand_back(self, callback, results, seconds: float) -> None:
        """In a member's receiving thread: queue a push's results for the engine's thread, and wake it."""
        self.received.put((callback, results, seconds))
        self.wake()

    def close(self, timeout: float = 10.0) -> None:
        for member in self.members:
            member.close(timeout)
