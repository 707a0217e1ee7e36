"""Per-codebook statistics of a take and the agreement of two takes: plain numpy.

For codes [T, G] (G = 16 codebooks, values 0..codebook_size-1):

- utilization: distinct codes used ÷ codebook_size (a constant codebook: 1/2048);
- entropy: of the codebook's code histogram over the take, in bits (constant: 0; every
  code equally often: log2 of the number of distinct codes, at most log2(2048) = 11);
- mean confidence: the mean probability of the chosen codes (None without probabilities);
- repeats: the fraction of frames 1..T-1 whose code equals the previous frame's.
"""

from __future__ import annotations

import numpy as np

CODEBOOK_SIZE = 2048
FIELDS = ("utilization", "entropy_bits", "mean_prob", "repeat_rate")


def codebook_stats(codes: np.ndarray, probs: np.ndarray | None = None,
                   codebook_size: int = CODEBOOK_SIZE) -> dict:
    """codes [T, G] int, probs [T, G] or None → {"frames", "codebook_size", and per field a list of G
    values} (mean_prob entries are None without probs; repeat_rate is None for fewer than 2 frames)."""
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must have shape [frames, codebooks], got {list(codes.shape)}")
    T, G = codes.shape
    if T == 0:
        raise ValueError("no frames: statistics need at least one frame")
    utilization, entropy = [], []
    for g in range(G):
        counts = np.bincount(codes[:, g], minlength=codebook_size)
        used = counts[counts > 0]
        p = used / T
        utilization.append(len(used) / codebook_size)
        entropy.append(float(max(0.0, -(p * np.log2(p)).sum())))
    repeat = (codes[1:] == codes[:-1]).mean(0).tolist() if T > 1 else [None] * G
    mean_prob = (np.asarray(probs, np.float64).mean(0).tolist() if probs is not None and len(probs) == T
                 else [None] * G)
    return {"frames": T, "codebook_size": codebook_size, "utilization": utilization, "entropy_bits": entropy,
            "mean_prob": mean_prob, "repeat_rate": repeat}


def agreement(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two takes' codes [Ta, G], [Tb, G] → differ [T, G] bool over the common T = min(Ta, Tb) frames,
    and per-codebook agreement [G] (fraction of those frames equal; NaN when T = 0)."""
    T = min(len(a), len(b))
    differ = np.asarray(a)[:T] != np.asarray(b)[:T]
    agree = 1.0 - differ.mean(0) if T else np.full(np.shape(a)[1], np.nan)
    return differ, agree
