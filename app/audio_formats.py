"""Audio bytes for the speech API (app/api.py): the engine's float samples as wav, pcm, flac or mp3.

pcm: raw 16-bit little-endian mono samples at the model's rate (24 kHz), no header. wav: 16-bit PCM;
streamed, its header says "length unknown" (0xFFFFFFFF sizes, as other speech servers send), since the
length is not known when the first chunk leaves. flac: soundfile. mp3: the ffmpeg the page already
needs for streaming audio, fed the whole take (mp3 and flac are not streamed: they come whole).
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from app.files import to_int16

MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg"}
STREAMED = ("pcm", "wav")  # formats whose bytes can leave as the frames are made
UNKNOWN = 0xFFFFFFFF  # a streamed WAV's RIFF and data sizes


class EncodeError(RuntimeError):
    """The server cannot make this format (no ffmpeg, or ffmpeg failed)."""


def pcm_bytes(audio: np.ndarray) -> bytes:
    return to_int16(audio).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int = UNKNOWN) -> bytes:
    """A 44-byte 16-bit mono PCM WAV header; data_bytes UNKNOWN: a stream whose length is not known yet."""
    riff = UNKNOWN if data_bytes == UNKNOWN else 36 + data_bytes
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data_bytes))


def encode(audio: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """The whole take in `fmt` (one of MEDIA_TYPES)."""
    if fmt == "pcm":
        return pcm_bytes(audio)
    if fmt == "wav":
        data = pcm_bytes(audio)
        return wav_header(sample_rate, len(data)) + data
    if fmt == "flac":
        buffer = io.BytesIO()
        sf.write(buffer, to_int16(audio), sample_rate, format="FLAC", subtype="PCM_16")
        return buffer.getvalue()
    if fmt == "mp3":
        return mp3_bytes(audio, sample_rate)
    raise ValueError(f"unknown format {fmt!r}")


def mp3_bytes(audio: np.ndarray, sample_rate: int) -> bytes:
    """Through a file, not a pipe: ffmpeg then goes back and writes the LAME header with the encoder's delay
    and padding, so decoders give back exactly the take's samples (through a pipe: up to a frame more)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise EncodeError("mp3 needs ffmpeg, which this server does not have: ask for wav, pcm or flac")
    with tempfile.TemporaryDirectory(prefix="omni-mp3-") as folder:
        path = Path(folder) / "speech.mp3"
        command = [ffmpeg, "-hide_banner", "-loglevel", "error", "-f", "s16le", "-ar", str(sample_rate), "-ac", "1",
                   "-i", "pipe:0", "-b:a", "128k", str(path)]
        done = subprocess.run(command, input=pcm_bytes(audio), capture_output=True, timeout=120)
        if done.returncode != 0:
            raise EncodeError(f"ffmpeg could not make mp3: {done.stderr.decode(errors='replace')[-300:]}")
        return path.read_bytes()
