"""`Stream`: one request's events, read by the caller's thread as the engine makes them."""

from __future__ import annotations

import queue

from omni_core.engine.output import EngineError, Failed
from omni_core.engine.sequence import Sequence
from omni_core.events import Done, Frame, Result

POLL_S = 0.1  # how often a reader waiting for its next event checks that the engine is alive


class Stream:
    """An iterator over TextDelta / Frame / AudioChunk events, then Done, for a request already
    handed to the engine. `close()` (or dropping the stream) stops it at the engine's next step.
    Reading never waits forever: if the engine goes down, `next()` raises EngineError."""

    def __init__(self, engine, seq: Sequence):
        self._engine, self._seq = engine, seq
        self.ended = False
        self.result: Result | None = None  # the Result, once Done has been read

    def __iter__(self) -> "Stream":
        return self

    def __next__(self):
        if self.ended:
            raise StopIteration
        event = self._next_event()
        if isinstance(event, Failed):
            self.ended = True
            raise event.error
        if isinstance(event, Frame):
            self._seq.frames_read += 1  # a reader too far behind is paused; reading resumes it
        if isinstance(event, Done):
            self.ended = True
            self.result = event.result
        return event

    def _next_event(self):
        events = self._seq.events
        while True:
            try:
                return events.get(timeout=POLL_S)
            except queue.Empty:
                try:
                    self._engine.check_alive()
                except EngineError as down:
                    try:
                        return events.get_nowait()  # what the engine put there before it went down
                    except queue.Empty:
                        self.ended = True
                        raise down from None

    @property
    def frames_made(self) -> int:
        """Frames the engine has made for this request so far (some may not have been read yet)."""
        return len(self._seq.codes)

    @property
    def released(self) -> bool:
        """The engine has let go of the request (finished, stopped or failed) and of its caches."""
        return self._seq.finished

    @property
    def paused(self) -> bool:
        """The engine has paused the request: its reader is more than `max_unread` frames behind."""
        return self._seq.paused and not self._seq.finished

    @property
    def stopped(self) -> str | None:
        """Why the engine stopped the request (eos, max_frames, cancelled, time_budget, stalled), once it has."""
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
        if not self._seq.finished:
            self._seq.cancel.set()


class TextStream(Stream):
    """A request whose text is still being written (`Pipeline.stream_text`): `append(piece)` adds to the text
    as it comes, `end()` says it is complete; its events are a Stream's. The talker reads each token once it
    has settled and waits when it has caught up; `close()` stops the request, and an unended text is stopped
    by the pipeline's time budget."""

    def append(self, text: str) -> None:
        """More of the text (RequestError if it is not a string, or after `end()`)."""
        self._seq.feed.append(text)

    def end(self) -> None:
        """The text is complete."""
        self._seq.feed.end()
