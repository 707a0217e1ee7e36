"""`Stream`: one request's events, read by the caller's thread as the engine makes them."""

from __future__ import annotations

from omni_core.engine.output import Failed
from omni_core.engine.sequence import Sequence
from omni_core.events import Done, Result


class Stream:
    """An iterator over TextDelta / Frame / AudioChunk events, then Done. The request is
    submitted on the first `next()` (or by `Pipeline.stream_together`); `close()` (or dropping
    the stream) stops it at the engine's next step."""

    def __init__(self, engine, seq: Sequence):
        self._engine, self._seq = engine, seq
        self._submitted = self.ended = False
        self.result: Result | None = None  # the Result, once Done has been read

    def __iter__(self) -> "Stream":
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        if not self._submitted:
            self._engine.submit(self._seq)
            self._submitted = True
        event = self._seq.events.get()
        if isinstance(event, Failed):
            self.ended = True
            raise event.error
        if isinstance(event, Done):
            self.ended = True
            self.result = event.result
        return event

    def mark_submitted(self) -> None:
        """The engine has been handed this request by someone else (Pipeline.stream_together)."""
        self._submitted = True

    @property
    def frames_made(self) -> int:
        """Frames the engine has made for this request so far (some may not have been read yet)."""
        return len(self._seq.codes)

    @property
    def released(self) -> bool:
        """The engine has let go of the request (finished, stopped or failed) and of its caches."""
        return self._seq.finished

    @property
    def stopped(self) -> str | None:
        """Why the engine stopped the request (eos, max_frames, cancelled, time_budget), once it has."""
        return self._seq.stats.stopped if self._seq.finished else None

    def close(self) -> None:
        """Stop the request (what a server does when the browser goes away)."""
        self._seq.cancel.set()
        self.ended = True

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if self._submitted and not self._seq.finished:
            self._seq.cancel.set()
