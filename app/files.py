"""The app's own output folder: one subfolder per request holding its WAV and codes files.

Gradio serves only from here and from `static/`. Folders older than `max_age_s` are
removed when a new one is made, so disk use stays bounded on a long-running server.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import soundfile as sf


class OutputDir:
    def __init__(self, root: Path | None = None, max_age_s: float = 3600.0):
        self.root = Path(root or tempfile.mkdtemp(prefix="omni-speech-lab-")).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s

    def new(self) -> Path:
        """A fresh folder for one request."""
        self._prune()
        folder = self.root / uuid.uuid4().hex
        folder.mkdir()
        return folder

    def _prune(self) -> None:
        cutoff = time.time() - self.max_age_s
        for folder in self.root.iterdir():
            if folder.is_dir() and folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float audio, clipped to [-1, 1] → int16, what the players take."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


def wav_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """A 16-bit PCM WAV in memory: what the streaming player is handed for a chunk. Gradio passes bytes
    through to its encoder; a (rate, samples) tuple it would first write to a file named by the samples'
    hash, and two listeners streaming the same take at once (the page's default text, greedy) then wrote
    and read that one file together: ffmpeg got half a file and that listener's stream failed."""
    buffer = io.BytesIO()
    sf.write(buffer, to_int16(audio), sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_wav(folder: Path, audio: np.ndarray, sample_rate: int, name: str = "speech.wav") -> Path:
    """The engine's samples as they are (32-bit float WAV): nothing is rounded or clipped."""
    path = folder / name
    sf.write(path, np.asarray(audio, dtype=np.float32), sample_rate, subtype="FLOAT")
    return path


def write_codes(folder: Path, codes: np.ndarray, text: str = "", stats: dict | None = None) -> list[Path]:
    """codes [T, 16] → codes.npy and codes.json (the same JSON object the `codes` API returns)."""
    npy = folder / "codes.npy"
    np.save(npy, codes.astype(np.int64), allow_pickle=False)
    doc = {"codes": codes.astype(int).tolist(), "text": text, "stats": stats or {}}
    js = folder / "codes.json"
    js.write_text(json.dumps(doc))
    return [npy, js]
