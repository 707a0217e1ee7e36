"""Code surgery: edit a take's codes and hear the result. Plain numpy.

An `Edit` touches one codebook over frames start..end (inclusive; one frame is a cell,
0..T-1 the whole codebook): `set` writes a value, `random` writes uniform random codes
(seeded), `drop` makes the cells contribute nothing to the decode (as the codebooks past
k do in "first k codebooks"), without changing their codes. Edits stack; the original
codes are never changed, so undo is a copy away.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OPS = ("set", "random", "drop")
CODEBOOK_SIZE = 2048


@dataclass(frozen=True)
class Edit:
    op: str
    codebook: int
    start: int = 0
    end: int | None = None  # inclusive; None: the last frame
    value: int = 0  # `set` only
    seed: int = 0  # `random` only

    def checked(self, frames: int, num_codebooks: int = 16, codebook_size: int = CODEBOOK_SIZE) -> "Edit":
        """This edit with `end` filled in, or ValueError saying what to change."""
        if frames == 0:
            raise ValueError("no take to edit: generate something or upload a codes file first")
        if self.op not in OPS:
            raise ValueError(f"unknown edit {self.op!r}: use one of {', '.join(OPS)}")
        codebook = _int(self.codebook, "codebook")
        if not 0 <= codebook < num_codebooks:
            raise ValueError(f"codebook {codebook} is outside 0..{num_codebooks - 1}")
        start = _int(self.start, "start frame")
        end = frames - 1 if self.end is None else _int(self.end, "end frame")
        for name, f in (("start frame", start), ("end frame", end)):
            if not 0 <= f < frames:
                raise ValueError(f"{name} {f} is out of range: this take has frames 0..{frames - 1}")
        if end < start:
            raise ValueError(f"end frame {end} is before start frame {start}")
        value = _int(self.value, "code") if self.op == "set" else 0
        if not 0 <= value < codebook_size:
            raise ValueError(f"code {value} is outside 0..{codebook_size - 1}")
        return Edit(self.op, codebook, start, end, value, _int(self.seed, "seed"))

    def describe(self) -> str:
        where = f"CB{self.codebook} frame {self.start}" if self.start == self.end else \
            f"CB{self.codebook} frames {self.start}..{self.end}"
        what = {"set": f"set to {self.value}", "random": f"random codes (seed {self.seed})", "drop": "dropped"}
        return f"{where}: {what[self.op]}"


def apply(codes: np.ndarray, drop: np.ndarray, edit: Edit) -> tuple[np.ndarray, np.ndarray]:
    """codes [T, G], drop [T, G] bool, a checked edit → new (codes, drop); the inputs are not changed."""
    codes, drop = codes.copy(), drop.copy()
    rows, g = slice(edit.start, edit.end + 1), edit.codebook
    if edit.op == "drop":
        drop[rows, g] = True
        return codes, drop
    n = edit.end + 1 - edit.start
    values = (np.full(n, edit.value) if edit.op == "set"
              else np.random.default_rng(edit.seed).integers(0, CODEBOOK_SIZE, size=n))
    codes[rows, g] = values
    drop[rows, g] = False  # a written code is heard again
    return codes, drop


def edited_cells(original: np.ndarray, codes: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """[T, G] bool: the cells whose code changed or that are dropped."""
    return (codes != original) | drop


def _int(value, name: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if not np.isfinite(number) or number != int(number):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(number)
