"""Audio a caller hands in (a clip to clone, a recording to encode): checked, made mono, resampled.

`clean_audio` turns (sample_rate, samples) into float32 mono samples at 24 kHz or raises
RequestError with a message that says what is wrong (not audio, a strange rate, silent,
too long, too short). Resampling is band-limited windowed-sinc interpolation on the
rational ratio (the method torchaudio's `resample` uses: Hann-windowed sinc, 6 zero
crossings, roll-off 0.99); the official package resamples with librosa (soxr), so a clip
at another rate gives slightly other samples there, and the parity tests use 24 kHz clips.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from omni_core.errors import RequestError

SAMPLE_RATE = 24000
MIN_RATE, MAX_RATE = 4000, 384000
MAX_SECONDS = 60.0
SILENCE = 1e-4  # peak below this (of full scale) is silence


def clean_audio(audio, what: str = "audio", max_seconds: float = MAX_SECONDS, min_samples: int = 1920):
    """(sample_rate, samples) → float32 mono samples at 24 kHz. samples: [N], or [N, channels] /
    [channels, N] (averaged); integer samples are scaled from their type's full range."""
    if not isinstance(audio, (tuple, list)) or len(audio) != 2:
        raise RequestError(f"{what} must be (sample_rate, samples), got {type(audio).__name__}")
    rate, samples = audio
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer, float)) or not float(rate).is_integer():
        raise RequestError(f"{what}: the sample rate must be a whole number of Hz, got {rate!r}")
    rate = int(rate)
    if not MIN_RATE <= rate <= MAX_RATE:
        raise RequestError(f"{what}: a sample rate of {rate} Hz is not audio this model can take "
                           f"(between {MIN_RATE} and {MAX_RATE} Hz)")
    x = _as_float(samples, what)
    if x.ndim == 2:
        x = x.mean(axis=1 if x.shape[0] > x.shape[1] else 0)
    if x.ndim != 1:
        raise RequestError(f"{what}: samples must be [N] or [N, channels], got shape {list(np.shape(samples))}")
    seconds = len(x) / rate
    if seconds > max_seconds:
        raise RequestError(f"{what} is {seconds:.1f} s long; the limit is {max_seconds:g} s: trim it")
    if not np.isfinite(x).all():
        raise RequestError(f"{what} holds NaN or infinite samples: not audio")
    if len(x) == 0 or np.abs(x).max() < SILENCE:
        raise RequestError(f"{what} is silent: record or upload a clip with sound in it")
    x = resample(x, rate, SAMPLE_RATE) if rate != SAMPLE_RATE else x
    if len(x) < min_samples:
        raise RequestError(f"{what} is {len(x) / SAMPLE_RATE * 1000:.0f} ms long; it needs at least "
                           f"{min_samples / SAMPLE_RATE * 1000:.0f} ms")
    return x.astype(np.float32)


def _as_float(samples, what: str) -> np.ndarray:
    try:
        x = np.asarray(samples)
    except Exception:
        raise RequestError(f"{what}: samples are not an array of numbers") from None
    if x.dtype.kind in "iu":  # PCM: full scale is 2^(bits-1) (unsigned: around its midpoint)
        half = 2.0 ** (8 * x.dtype.itemsize - 1)
        return (x.astype(np.float64) - (half if x.dtype.kind == "u" else 0.0)) / half
    if x.dtype.kind != "f":
        raise RequestError(f"{what}: samples must be numbers, got {x.dtype}")
    return x.astype(np.float64)


def resample(x: np.ndarray, rate_in: int, rate_out: int, zeros: int = 6, rolloff: float = 0.99) -> np.ndarray:
    """Band-limited resampling of x [N] from rate_in to rate_out Hz → [ceil(N · out / in)]."""
    g = math.gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g
    cutoff = min(up, down) * rolloff
    width = math.ceil(zeros * down / cutoff)
    # kernel[p, j]: output phase p (of `up`) reads input j of its window, sinc-weighted.
    idx = torch.arange(-width, width + down, dtype=torch.float64)[None] / down
    t = idx + torch.arange(0, -up, -1, dtype=torch.float64)[:, None] / up
    t = (t * cutoff).clamp(-zeros, zeros)
    window = torch.cos(t * math.pi / zeros / 2) ** 2
    t = t * math.pi
    kernel = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * cutoff / down  # [up, K]
    wav = torch.nn.functional.pad(torch.from_numpy(np.asarray(x, np.float64))[None, None], (width, width + down))
    out = torch.nn.functional.conv1d(wav, kernel[:, None], stride=down)  # [1, up, frames]
    out = out.transpose(1, 2).reshape(-1)
    return out[:math.ceil(len(x) * up / down)].numpy()
