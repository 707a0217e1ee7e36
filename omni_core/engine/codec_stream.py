"""One codec-stream interface, two implementations: a request's stream decoded in the engine's thread
(`LocalStream`) or in a codec process (`RemoteStream`, engine/codec_process.py), and where the streams
live (`LocalCodec`, or `CodecPool`: engine/codec_pool.py). output.py and the step use only these
interfaces; none asks which kind it holds.

A group of streams (`group_key` equal, chunks of equal length) decodes in one codec call, each row's
audio bit for bit what its own push gives (`push_together`). Every chunk's audio is handed to `back`
in the engine's thread: a local stream's at once, a remote one's when the engine takes it in
(`Codec.deliver`, between steps and whenever the engine waits for its codec), so no other thread
writes a request's state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from omni_core.codec.streaming import StreamingDecoder, push_together

# back(results, seconds): per stream, in order, (wav [s] float32 | None, error | None); seconds: the codec's time for
# the call (in the engine's thread, or in the codec process), charged to each row
Back = Callable[[list, float], None]


class CodecStream(Protocol):
    codec: torch.nn.Module
    num_codebooks: int | None
    num_frames: int  # frames pushed so far: streams at one position decode together

    def group_key(self) -> tuple:
        """Streams with equal keys can decode their chunks (of equal length) in one call."""

    def decode(self, streams: list, chunks: list[np.ndarray], last: bool, back: Back) -> None:
        """Decode chunks [Q, n] of these streams (this one's group) in one codec call; last: they end after it.
        Raises if the call cannot be made or fails here (then each row may be tried alone)."""

    def drop(self) -> None:
        """Let go of the stream before its end (its request failed)."""


class Codec(Protocol):
    def open(self, prefix: torch.Tensor | None = None) -> CodecStream:
        """A new stream; prefix [Q, n]: codes decoded first whose audio is not wanted (a clone's reference)."""

    def mark(self) -> object:
        """Where the pushes stand now (`wait_for`)."""

    def wait_for(self, mark: object) -> None:
        """Wait until every push sent before `mark` is back, and hand its audio over (`deliver`)."""

    def deliver(self) -> None:
        """Hand the audio that came back over to its requests (`back`), in the engine's thread."""

    @property
    def busy(self) -> bool:
        """Audio sent for and not yet handed over."""

    def close(self) -> None: ...


class LocalStream(StreamingDecoder):
    """A stream decoded in the engine's thread, in the step that sends its chunk."""

    def __init__(self, codec: torch.nn.Module, num_codebooks: int | None = None):
        super().__init__(codec, num_codebooks)
        self.device = next(codec.parameters()).device

    def group_key(self) -> tuple:
        return id(self.codec), None, self.num_codebooks, self.num_frames

    def decode(self, streams: list["LocalStream"], chunks: list[np.ndarray], last: bool, back: Back) -> None:
        t = time.perf_counter()
        wavs = push_together(streams, [torch.from_numpy(c)[None].to(self.device) for c in chunks])  # [1, Q, n] each
        results = [(w[0, 0].float().cpu().numpy(), None) for w in wavs]
        back(results, time.perf_counter() - t)

    def drop(self) -> None:
        pass


class LocalCodec:
    """The streams decoded in the engine's thread: nothing to wait for, nothing comes back later."""

    busy = False

    def __init__(self, codec: torch.nn.Module):
        self.codec = codec

    def open(self, prefix: torch.Tensor | None = None) -> LocalStream:
        stream = LocalStream(self.codec)
        if prefix is not None:
            stream.push(prefix[None])
        return stream

    def mark(self) -> None:
        return None

    def wait_for(self, mark: None) -> None:
        pass

    def deliver(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(eq=False)
class RemoteStream:
    """The engine's handle on one stream decoded in a `CodecProcess`: its key there and its position."""
    process: object  # CodecProcess
    key: int
    num_codebooks: int | None
    num_frames: int = 0

    @property
    def codec(self) -> torch.nn.Module:
        return self.process.codec

    def group_key(self) -> tuple:
        return id(self.codec), id(self.process), self.num_codebooks, self.num_frames  # a push goes to one process

    def decode(self, streams: list["RemoteStream"], chunks: list[np.ndarray], last: bool, back: Back) -> None:
        """Sent now; the audio comes back while the engine goes on (the process's receiving thread queues it
        for the engine's thread: `CodecPool.deliver`)."""
        process = self.process

        def came_back(results: list | None, seconds: float) -> None:
            if results is None:  # the process ended: every chunk of the push is lost
                return back([(None, process.error)] * len(streams), seconds)
            back([(wav, None if error is None else RuntimeError(f"the codec failed on this request's audio: {error}"))
                  for wav, error in results], seconds)

        process.push([(s, c, last) for s, c in zip(streams, chunks)], came_back)

    def drop(self) -> None:
        self.process.drop(self)
