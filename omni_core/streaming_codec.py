"""Streaming Code2Wav: decode frames as they arrive, each frame's audio computed once.

Every part of Code2Wav is causal, so a chunk can be decoded from the carried
state of the previous chunks instead of re-decoding left context:

- each causal convolution keeps its last (effective_kernel - 1) inputs, which
  replace the zero left padding of a whole-utterance decode;
- each decoder transposed convolution (kernel 2r, stride r, r trimmed on both
  sides) keeps its last input: output sample j depends on inputs floor(j/r) and
  floor(j/r) + 1, so a sample is final once the input after it has arrived;
- the sliding-window attention keeps the last (window - 1) keys and values of
  every layer (a query at position p sees keys p-window+1..p) and RoPE positions
  keep counting across chunks.

The codec modules read and write this state through `CodecState`; with no state
they decode a whole utterance. Concatenating the chunks of a stream gives the
whole-utterance output exactly (up to float rounding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .codec import Code2Wav


class SlidingKVCache:
    """K/V of the last (window - 1) positions of every layer: k[l], v[l]: [B, H, <= window-1, D]."""

    def __init__(self, window: int):
        self.keep = window - 1
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}

    @property
    def length(self) -> int:
        """Cached positions (the same in every layer between forwards)."""
        return self.k[0].shape[2] if self.k else 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: [B, H, T, D] new positions → past + new: [B, H, length + T, D]; keeps the tail."""
        if layer in self.k:
            k, v = torch.cat([self.k[layer], k], dim=2), torch.cat([self.v[layer], v], dim=2)
        start = max(k.shape[2] - self.keep, 0)
        self.k[layer], self.v[layer] = k[:, :, start:].clone(), v[:, :, start:].clone()
        return k, v


class CodecState:
    """What one Code2Wav stream carries between chunks (every tensor has the batch dimension).

    Convolution tails are keyed by the module that owns them, so the codec modules
    need no names or indices to find their state.
    """

    def __init__(self, window: int):
        self.kv = SlidingKVCache(window)
        self.position = 0  # frames decoded so far: the RoPE position of the next frame
        self.tails: dict[nn.Module, torch.Tensor] = {}

    def prepend(self, module: nn.Module, x: torch.Tensor, keep: int, zeros_first: bool) -> torch.Tensor:
        """x: [B, C, T] → [B, C, P + T] with the P columns `module` kept last time in front; keeps the
        last `keep` columns for next time. The first chunk gets `keep` zeros (a causal conv's left
        padding) when `zeros_first`, else nothing (P = 0)."""
        if keep == 0:
            return x
        past = self.tails.get(module)
        if past is None and zeros_first:
            past = x.new_zeros(*x.shape[:2], keep)
        if past is not None:
            x = torch.cat([past, x], dim=-1)
        self.tails[module] = x[..., max(x.shape[-1] - keep, 0):].clone()
        return x

    def advance(self, num_frames: int) -> None:
        self.position += num_frames


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
            dtype = self.codec.code_embedding.weight.dtype
            return torch.zeros(B, 1, 0, dtype=dtype, device=codes.device)
        wav = self.codec(codes, self.num_codebooks, state=self.state)
        self.num_frames += n
        self.num_samples += wav.shape[-1]
        return wav
