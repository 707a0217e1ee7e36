"""Streaming Code2Wav: decode frames as they arrive, each frame's audio computed once.

`StreamingDecoder` feeds each chunk to `Code2Wav` with a `CodecState` (state.py:
what every causal module carries between chunks). Concatenating the chunks of a
stream gives the whole-utterance output exactly (up to float rounding).
"""

from __future__ import annotations

import torch

from omni_core.codec.code2wav import Code2Wav
from omni_core.codec.state import CodecState


class StreamingDecoder:
    """Feed codes [B, Q, n] as they arrive (any n); `push` returns the new final audio [B, 1, s].

    The concatenated pushes equal `Code2Wav.forward` on all the codes. Latency:
    every pushed frame yields audio at once, but each decoder transposed conv
    holds back the samples that depend on the next input, in all
    `holdback` samples (555 = 23 ms at 24 kHz for rates (8, 5, 4, 3) after
    (2, 2)): the first frame yields 1920 - 555 = 1365 samples, every later frame
    1920. The held-back tail of the last frame is never emitted, as the
    whole-utterance decode does not emit it either.
    """

    def __init__(self, codec: Code2Wav, num_codebooks: int | None = None):
        self.codec, self.num_codebooks = codec, num_codebooks
        self.state = CodecState(codec.cfg.transformer.sliding_window)
        self.batch_size: int | None = None
        self.num_frames = 0  # frames pushed
        self.num_samples = 0  # samples returned
        self.holdback = codec.cfg.samples_per_frame - codec.num_samples(1)

    @torch.no_grad()
    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: [B, Q, n] (the next n frames) → wav [B, 1, s], s = num_samples(frames so far) - emitted."""
        B, _, n = codes.shape
        if self.batch_size is None:
            self.batch_size = B
        elif B != self.batch_size:
            raise ValueError(f"this stream decodes {self.batch_size} rows, got codes for {B}")
        if n == 0:
            return torch.zeros(B, 1, 0, dtype=self.codec.dtype, device=codes.device)
        wav = self.codec(codes, self.num_codebooks, state=self.state)
        self.num_frames += n
        self.num_samples += wav.shape[-1]
        return wav


@torch.no_grad()
def push_together(decoders: list[StreamingDecoder], chunks: list[torch.Tensor]) -> list[torch.Tensor]:
    """Several streams' next chunks in one codec call: chunks[i] [B_i, Q, n] for decoders[i], all of one
    codec, at the same frame position, with the same n → each stream's audio [B_i, 1, s], bit for bit as
    its own push returns it (row by row, or batched where that holds: backend.py, batching.py). The
    streams' states are replaced only when the call succeeded: after an error each can push alone."""
    if len(decoders) == 1:  # nothing to stack
        return [decoders[0].push(chunks[0])]
    first = decoders[0]
    if any(d.codec is not first.codec or d.num_codebooks != first.num_codebooks for d in decoders):
        raise ValueError("streams of different codecs or codebook counts cannot decode as one batch")
    if len({c.shape[2] for c in chunks}) != 1:
        raise ValueError("only chunks of the same number of frames decode as one batch")
    for d, c in zip(decoders, chunks):
        if d.batch_size not in (None, c.shape[0]):
            raise ValueError(f"this stream decodes {d.batch_size} rows, got codes for {c.shape[0]}")
    sizes = [c.shape[0] for c in chunks]
    state = CodecState.stack([d.state for d in decoders])
    wav = first.codec(torch.cat(chunks), first.num_codebooks, state=state)
    for d, part, size in zip(decoders, state.split(sizes), sizes):
        d.state, d.batch_size = part, size
        d.num_frames += chunks[0].shape[2]
        d.num_samples += wav.shape[-1]
    return list(wav.split(sizes))
