"""How close a re-decode is to the audio it came from: an SNR and a log-mel distance.

Plain numpy. The codec rebuilds how audio sounds, not its exact waveform, so the two
measures tell different things: the SNR compares samples (a small phase shift alone
drives it to 0 dB or below), the log-mel distance compares the spectrogram the ear
follows (mean absolute difference in dB per mel bin and 20 ms column).
"""

from __future__ import annotations

import numpy as np

from app.spectrum import log_mel

FLOOR_DB = 80.0  # mel bins more than this below the clip's loudest count as this quiet (silence
# would otherwise dominate a distance in dB)

MEANING = ("SNR compares samples: a codec rebuilds how the audio sounds, not its waveform, so a re-decode that "
           "sounds the same can score 0 dB or less. The log-mel distance compares the spectrogram the ear "
           "follows: about 1–3 dB is close, above 6 dB the difference is plain to hear.")


def aligned(original: np.ndarray, decoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both cut to the shorter length (a re-decode covers whole 80 ms frames, so it runs a little longer)."""
    n = min(len(original), len(decoded))
    return np.asarray(original[:n], np.float64), np.asarray(decoded[:n], np.float64)


def snr_db(original: np.ndarray, decoded: np.ndarray) -> float:
    """10·log10(signal power / error power) over the common length; +inf for an exact copy."""
    x, y = aligned(original, decoded)
    error = float(np.sum((x - y) ** 2))
    signal = float(np.sum(x ** 2))
    if error == 0.0:
        return float("inf")
    return 10 * np.log10(max(signal, 1e-20) / error)


def mel_distance(original: np.ndarray, decoded: np.ndarray, sample_rate: int) -> float:
    """Mean |log-mel(original) − log-mel(decoded)| in dB, both floored FLOOR_DB below the original's peak."""
    x, y = aligned(original, decoded)
    a, b = log_mel(x, sample_rate), log_mel(y, sample_rate)
    if a.size == 0:
        return 0.0
    floor = a.max() - FLOOR_DB
    return float(np.mean(np.abs(np.maximum(a, floor) - np.maximum(b, floor))))


def measures(original: np.ndarray, decoded: np.ndarray, sample_rate: int) -> dict:
    """{"snr_db", "mel_distance"} of a re-decode against its original (JSON-safe: inf becomes None)."""
    snr = snr_db(original, decoded)
    return {"snr_db": None if np.isinf(snr) else round(snr, 3),
            "mel_distance": round(mel_distance(original, decoded, sample_rate), 3)}
