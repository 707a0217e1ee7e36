"""`TextFeed`: text a caller sends while its request runs (`Pipeline.stream_text`).

The caller's thread appends pieces and ends the text; the engine's thread takes what came since it
last looked, between steps. Each append wakes an engine that is waiting for it, so a talker that
caught up with the text goes on within the engine's next turn, not a poll later.
"""

from __future__ import annotations

import threading
from typing import Callable

from omni_core.errors import RequestError
from omni_core.request import MAX_TEXT_CHARS, clean_piece


class TextFeed:
    def __init__(self, wake: Callable[[], None] = lambda: None):
        self._wake = wake  # tells the engine that text came
        self._lock = threading.Lock()
        self._new: list[str] = []  # pieces the engine has not taken yet
        self._chars = 0  # characters taken in, all pieces
        self._ended = False
        self.warnings: list[str] = []  # what the caller should know (text cut at the limit), until taken

    def append(self, text: str) -> None:
        """Add a piece of the text (cleaned as a request's text is; past MAX_TEXT_CHARS in all, cut)."""
        piece = clean_piece(text)
        with self._lock:
            if self._ended:
                raise RequestError("the text was already ended: append before end()")
            room = MAX_TEXT_CHARS - self._chars
            if len(piece) > room:
                self.warnings.append(f"the text passed {MAX_TEXT_CHARS} characters; the rest is not spoken")
                piece = piece[:max(room, 0)]
            self._chars += len(piece)
            if piece:
                self._new.append(piece)
        self._wake()

    def end(self) -> None:
        """The text is complete: the talker reads its last tokens, then tts_eos. Ending twice is harmless."""
        with self._lock:
            self._ended = True
        self._wake()

    def take(self) -> tuple[str, bool, list[str]]:
        """(the text appended since the last take, whether the text has ended, new warnings): the engine's side."""
        with self._lock:
            new, self._new = "".join(self._new), []
            warnings, self.warnings = self.warnings, []
            return new, self._ended, warnings
