"""Codes files: [T, 16] integer codes as .npy or .json, read as data only.

`.npy` is read with `allow_pickle=False` (an object array is refused, never
unpickled); `.json` is a list of frames or {"codes": [...]}. Every problem is a
RequestError that says what is wrong with the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from omni_core.request import MAX_FRAMES, RequestError

MAX_FILE_BYTES = 5 * 1024 * 1024
NUM_CODEBOOKS = 16
CODEBOOK_SIZE = 2048


def load_codes(path: str | Path) -> np.ndarray:
    """A codes file → int64 [T, 16] with every code in 0..2047."""
    path = Path(path)
    if not path.is_file():
        raise RequestError(f"no such file: {path.name}")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RequestError(f"{path.name} is {size / 1e6:.1f} MB; codes files are limited to "
                           f"{MAX_FILE_BYTES // (1024 * 1024)} MB")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        raw = _read_npy(path)
    elif suffix == ".json":
        raw = _read_json(path)
    else:
        raise RequestError(f"{path.name} is not a codes file: upload a .npy or .json file of shape [frames, 16]")
    return check_codes(raw, path.name)


def _read_npy(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e):
            raise RequestError(f"{path.name} is not a plain numeric .npy array: pickled or object data "
                               "is never loaded") from None
        raise RequestError(f"{path.name} is not a readable .npy file ({e})") from None
    except Exception as e:
        raise RequestError(f"{path.name} is not a readable .npy file ({type(e).__name__})") from None


def _read_json(path: Path):
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"{path.name} is not valid JSON: {e}") from None
    if isinstance(data, dict):
        data = data.get("codes")
    if not isinstance(data, list):
        raise RequestError(f"{path.name} must hold a list of frames or {{\"codes\": [...]}}")
    try:
        return np.array(data, dtype=np.float64)
    except (ValueError, TypeError):
        raise RequestError(f"{path.name}: every frame must be a list of {NUM_CODEBOOKS} numbers") from None


def check_codes(raw, name: str = "codes") -> np.ndarray:
    arr = np.asarray(raw)
    if arr.dtype.kind not in "iuf":
        raise RequestError(f"{name} holds {arr.dtype} values; codes must be integers")
    if arr.ndim != 2 or arr.shape[1] != NUM_CODEBOOKS:
        raise RequestError(f"{name} has shape {list(arr.shape)}; codes must have shape [frames, {NUM_CODEBOOKS}]")
    if arr.shape[0] == 0:
        raise RequestError(f"{name} has no frames")
    if arr.shape[0] > MAX_FRAMES:
        raise RequestError(f"{name} has {arr.shape[0]} frames; the limit is {MAX_FRAMES}")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise RequestError(f"{name} contains NaN or infinite values")
        if not (arr == np.round(arr)).all():
            raise RequestError(f"{name} contains fractional values; codes must be integers")
    if arr.min() < 0 or arr.max() >= CODEBOOK_SIZE:
        raise RequestError(f"{name} has codes outside 0..{CODEBOOK_SIZE - 1} "
                           f"(found {int(arr.min())}..{int(arr.max())})")
    return arr.astype(np.int64)


def codes_to_json(codes: np.ndarray) -> str:
    return json.dumps({"codes": np.asarray(codes, dtype=np.int64).tolist()})
