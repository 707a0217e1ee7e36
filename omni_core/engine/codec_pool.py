"""`CodecPool`: the codec streams spread over several codec processes, so that their chunks decode in parallel.

One codec process decodes a group's chunks row after row (`code2wav.row_by_row`: a row's audio may not
depend on its neighbours), so 8 newcomers' first chunks took it 18 ms on one core while the engine's thread
waited for them (a first chunk is waited for: engine/loop.py `emit`). With two processes each decodes half
of them at once. A stream lives in one process (its state is there), given round robin as streams open; a
`codec_groups` group is cut by process, and each part is one push. A stream's audio is its own decode's in
any process (tests/test_codec_process.py).

A process that ends fails its own streams alone (their requests get the CodecProcessError); the next
stream to open finds a new process in its place (or, if none can start, opens in one still alive).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from omni_core.engine.codec_process import CodecProcess, CodecProcessError, RemoteStream

log = logging.getLogger(__name__)


class CodecPool:
    def __init__(self, codec: torch.nn.Module, threads: int, processes: int = 1):
        """processes: how many codec processes, each with `threads` kernel threads."""
        self.codec, self.threads = codec, threads
        self.members: list[CodecProcess] = []
        try:
            for _ in range(processes):
                self.members.append(CodecProcess(codec, threads))
        except BaseException:
            self.close()
            raise
        self.opened = 0  # streams opened: the next one opens in member opened % len(members)

    def open(self, num_codebooks: int | None, prefix: np.ndarray | None = None) -> RemoteStream:
        """A new stream in the next member, round robin. One that has ended is replaced first; if no new process
        can start (no room in shared memory), the stream opens in a member still alive (raises if none is)."""
        turn, self.opened = self.opened % len(self.members), self.opened + 1
        member = self.members[turn]
        if not member.alive:
            member.close()
            try:
                member = self.members[turn] = CodecProcess(self.codec, self.threads)
            except (OSError, RuntimeError) as exc:
                alive = [m for m in self.members if m.alive]
                if not alive:
                    raise CodecProcessError(f"no codec process is left, and a new one cannot start: {exc}") from exc
                log.warning("a codec process ended and a new one cannot start (%s): %d left", exc, len(alive))
                member = alive[0]
        return member.open(num_codebooks, prefix)

    def mark(self) -> dict[CodecProcess, int]:
        """Where every member's pushes stand now: `wait_for` it waits for every push sent before."""
        return {member: member.next_tag for member in self.members}

    def wait_for(self, mark: dict[CodecProcess, int]) -> None:
        for member, tag in mark.items():
            member.wait_for(tag)

    def close(self, timeout: float = 10.0) -> None:
        for member in self.members:
            member.close(timeout)
