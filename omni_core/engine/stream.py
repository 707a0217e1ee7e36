"""`Stream`: one request's events, read by the caller's thread as the engine makes them."""

from __future__ import annotations

from ..events import Done
from .sequence import Failed, Sequence


class Stream:
    """An iterator over TextDelta / Frame / AudioChunk events, then Done. The request is
    submitted on the first `next()`; `close()` (or dropping the stream) stops it at the
    engine's next step."""

    def __init__(self, engine, seq: Sequence):
        self.engine, self.seq = engine, seq
        self.submitted = self.ended = False

    def __iter__(self) -> "Stream":
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        if not self.submitted:
            self.submitted = True
            self.engine.submit(self.seq)
        event = self.seq.events.get()
        if isinstance(event, Failed):
            self.ended = True
            raise event.error
        if isinstance(event, Done):
            self.ended = True
        return event

    @property
    def frames_made(self) -> int:
        """Frames the engine has made for this request so far (some may not have been read yet)."""
        return len(self.seq.codes)

    @property
    def released(self) -> bool:
        """The engine has let go of the request (finished, stopped or failed)."""
        return self.seq.finished

    def close(self) -> None:
        """Stop the request (what a server does when the browser goes away)."""
        self.seq.cancel.set()
        self.ended = True

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if self.submitted and not self.seq.finished:
            self.seq.cancel.set()
