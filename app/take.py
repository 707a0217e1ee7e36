"""`Take`: one session's current utterance, kept in gr.State.

It grows in place while a request streams, so the view switch sees the frames made
so far, and it holds the request's own cancel flag, which Stop sets. Code surgery keeps
its edited codes and dropped cells beside the original codes, which never change (undo
is one click). Probabilities are the engine's (a generated take) or a teacher-forced score
(`pipe.score`: an encoded recording, an uploaded file, an edited take; app/scoring.py); the
edited codes' own scores are kept beside the original's. Nothing here is shared between
sessions or requests.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

NUM_CODE_GROUPS = 16


@dataclass(eq=False)
class Take:
    view: str = "codes"
    codes: list[np.ndarray] = field(default_factory=list)  # per frame: int64 [16]
    probs: list[np.ndarray] = field(default_factory=list)  # per frame: float32 [16]
    top_codes: list[np.ndarray] = field(default_factory=list)  # per frame: int64 [16, 5] alternatives
    top_probs: list[np.ndarray] = field(default_factory=list)  # per frame: float32 [16, 5]
    mismatch: list[np.ndarray] = field(default_factory=list)  # compare mode, per frame: bool [16]
    audio: list[np.ndarray] = field(default_factory=list)  # float32 chunks, in order
    text: str = ""  # what is spoken (chat mode: the reply as it is written)
    first_audio_s: float | None = None
    batch: int = 1  # requests in the engine step that made the last frame
    finished: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)  # set: the engine stops within a frame
    edited_codes: np.ndarray | None = None  # code surgery: [T, 16] after the edits (None: no edits)
    drop: np.ndarray | None = None  # [T, 16] bool: cells that contribute nothing to the decode
    edits: list = field(default_factory=list)  # the Edits applied, in order
    edited_audio: np.ndarray | None = None
    request: object = None  # the SpeechRequest the probabilities are under (generated with, or scored with)
    scored: bool = False  # the probabilities come from a score (pipe.score), not from generating the take
    edited_probs: np.ndarray | None = None  # the edited codes scored under `request`: [T, 16]
    edited_top: tuple | None = None  # (top codes, top probs) [T, 16, 5] of the edited codes

    @classmethod
    def from_codes(cls, codes: np.ndarray, audio: np.ndarray, view: str = "codes") -> "Take":
        """An uploaded codes file or a recording: codes [T, 16] and their decoded audio, no probabilities (until
        scored)."""
        return cls(view=view, codes=list(codes), audio=[audio], finished=True)

    @property
    def frames(self) -> int:
        return len(self.codes)

    def add_frame(self, frame) -> None:
        self.codes.append(np.asarray(frame.codes, dtype=np.int64))
        self.probs.append(np.asarray(frame.probs, dtype=np.float32))
        self.batch = frame.batch  # requests in the engine step that made it
        if frame.top_codes is not None:
            self.top_codes.append(np.asarray(frame.top_codes, dtype=np.int64))
            self.top_probs.append(np.asarray(frame.top_probs, dtype=np.float32))
        if frame.mismatch is not None:
            self.mismatch.append(np.asarray(frame.mismatch, dtype=bool))

    def add_audio(self, audio: np.ndarray) -> None:
        self.audio.append(np.asarray(audio, dtype=np.float32))

    def finish(self, result) -> None:
        """Replace the streamed pieces with the engine's final result."""
        self.codes = list(result.codes)
        if result.probs is not None:
            self.probs = list(result.probs)
        if result.top_codes is not None:
            self.top_codes, self.top_probs = list(result.top_codes), list(result.top_probs)
        self.audio = [result.audio]
        self.text = result.text
        self.finished = True

    def codes_array(self) -> np.ndarray:
        codes = list(self.codes)  # a snapshot: the request may still be appending
        return np.stack(codes) if codes else np.zeros((0, NUM_CODE_GROUPS), np.int64)

    def audio_array(self) -> np.ndarray:
        audio = list(self.audio)
        return np.concatenate(audio) if audio else np.zeros(0, np.float32)

    def current_codes(self) -> np.ndarray:
        """The codes as heard now: the edited ones after code surgery, else the original."""
        return self.edited_codes if self.edited_codes is not None else self.codes_array()

    def current_audio(self) -> np.ndarray:
        """The audio as heard now: the edited take's after code surgery, else the original."""
        return self.edited_audio if self.edited_audio is not None else self.audio_array()

    def edited_mask(self) -> np.ndarray | None:
        """[T, 16] bool: cells changed or dropped by code surgery (None: no edits)."""
        if self.edited_codes is None:
            return None
        return (self.edited_codes != self.codes_array()) | self.drop

    def has_probs(self) -> bool:
        """The original codes have probabilities for every frame (generated, or scored)."""
        return self.frames > 0 and len(self.probs) == self.frames

    def codes_changed(self) -> bool:
        """Code surgery wrote other codes (set / random), not only dropped cells."""
        return self.edited_codes is not None and not np.array_equal(self.edited_codes, self.codes_array())

    def set_score(self, score, request) -> None:
        """The original codes' probabilities and alternatives from `pipe.score` under `request`."""
        self.probs, self.top_codes, self.top_probs = list(score.probs), list(score.top_codes), list(score.top_probs)
        self.request, self.scored = request, True
        self.edited_probs = self.edited_top = None  # the edited codes' scores were under the old request

    def set_edited_score(self, score) -> None:
        self.edited_probs, self.edited_top = score.probs, (score.top_codes, score.top_probs)

    def alternatives(self) -> tuple[np.ndarray, np.ndarray] | None:
        """top codes and their probabilities [T, 16, 5] of the codes as heard now, or None (not scored, or
        still streaming)."""
        if self.codes_changed():
            return self.edited_top
        top, top_probs = list(self.top_codes), list(self.top_probs)
        if not top or len(top) != self.frames or len(top_probs) != len(top):
            return None
        return np.stack(top), np.stack(top_probs)

    def arrays(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """codes [T, 16] (as heard now), probs [T, 16] or None, mismatch [T, 16] or None, all of the same T.
        After surgery that wrote codes, the probabilities are the edited codes' score (None until scored)."""
        codes = self.current_codes()
        T = len(codes)
        probs = [] if self.codes_changed() and self.edited_probs is None else \
            list(self.edited_probs if self.codes_changed() else self.probs)[:T]
        mismatch = list(self.mismatch)[:T]
        return (codes, np.stack(probs) if len(probs) == T and T else None,
                np.stack(mismatch) if len(mismatch) == T and T else None)
