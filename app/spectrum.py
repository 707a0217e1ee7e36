"""A take's audio as a log-mel spectrogram or a waveform envelope, on the heatmap's time axis.

Plain numpy. Column c covers samples [c·hop, (c+1)·hop): with hop = 480 (20 ms at 24 kHz)
a codec frame (1920 samples, 80 ms) is exactly 4 columns, so frame i of the heatmap sits
over its own sound. Long takes use a multiple of that hop so a picture stays small.
"""

from __future__ import annotations

import numpy as np

N_FFT = 1024
N_MELS = 64
BASE_HOP = 480  # samples per column: a quarter of a frame at 24 kHz
MAX_COLUMNS = 1000


def hop_for(num_samples: int, samples_per_frame: int = 1920) -> int:
    """The smallest multiple of BASE_HOP (or a whole frame multiple) that keeps ≤ MAX_COLUMNS columns."""
    hop = BASE_HOP
    while num_samples / hop > MAX_COLUMNS:
        hop = hop * 2 if hop < samples_per_frame else hop + samples_per_frame
    return hop


def log_mel(audio: np.ndarray, sample_rate: int, hop: int = BASE_HOP, n_fft: int = N_FFT,
            n_mels: int = N_MELS) -> np.ndarray:
    """audio [N] → log-mel power in dB [n_mels, ceil(N / hop)], low frequencies first; each window is
    centred on its column's middle, so column c describes samples [c·hop, (c+1)·hop)."""
    audio = np.asarray(audio, np.float32)
    cols = int(np.ceil(len(audio) / hop))
    if cols == 0:
        return np.zeros((n_mels, 0), np.float32)
    pad_left = n_fft // 2 - hop // 2
    padded = np.pad(audio, (max(pad_left, 0), n_fft + hop))
    starts = np.arange(cols) * hop + max(pad_left, 0) - pad_left
    frames = padded[starts[:, None] + np.arange(n_fft)[None, :]] * np.hanning(n_fft).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [cols, n_fft/2+1]
    mel = power @ mel_filters(sample_rate, n_fft, n_mels).T  # [cols, n_mels]
    return (10 * np.log10(np.maximum(mel, 1e-10))).T.astype(np.float32)


def mel_filters(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangular filters [n_mels, n_fft/2+1] evenly spaced on the mel scale (HTK formula)."""
    to_mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    to_hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    edges = to_hz(np.linspace(0, to_mel(sample_rate / 2), n_mels + 2))
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (freqs - lower) / np.maximum(centre - lower, 1e-9)
    falling = (upper - freqs) / np.maximum(upper - centre, 1e-9)
    return np.maximum(0, np.minimum(rising, falling))


def envelope(audio: np.ndarray, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """The waveform's min and max per column of `hop` samples: [cols] each."""
    audio = np.asarray(audio, np.float32)
    cols = int(np.ceil(len(audio) / hop))
    padded = np.pad(audio, (0, cols * hop - len(audio))).reshape(cols, hop)
    return padded.min(1), padded.max(1)
