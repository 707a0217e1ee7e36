"""What a streaming Code2Wav carries between chunks: convolution tails, sliding-window K/V, the position.

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

The codec modules (codec.py) read and write this state; with no state they decode
a whole utterance. This module depends on nothing in the codec, so the imports run
one way: codec_state ← codec ← streaming_codec.
"""

from __future__ import annotations

import torch
from torch import nn


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

    @classmethod
    def stack(cls, states: list["CodecState"]) -> "CodecState":
        """Several streams' states as one batch, rows in order (a new state: the given ones are left as
        they are). They must be at the same position, so they hold the same tails and K/V lengths."""
        first = states[0]
        if any(s.position != first.position for s in states):
            raise ValueError("only streams at the same position decode as one batch")
        merged = cls(first.kv.keep + 1)
        merged.position = first.position
        merged.tails = {m: torch.cat([s.tails[m] for s in states]) for m in first.tails}
        merged.kv.k = {i: torch.cat([s.kv.k[i] for s in states]) for i in first.kv.k}
        merged.kv.v = {i: torch.cat([s.kv.v[i] for s in states]) for i in first.kv.v}
        return merged

    def split(self, sizes: list[int]) -> list["CodecState"]:
        """The inverse of `stack`: one state per group of `sizes` rows."""
        parts = [CodecState(self.kv.keep + 1) for _ in sizes]
        for part in parts:
            part.position = self.position
        for m, tail in self.tails.items():
            for part, t in zip(parts, tail.split(sizes)):
                part.tails[m] = t
        for store, name in ((self.kv.k, "k"), (self.kv.v, "v")):
            for i, tensor in store.items():
                for part, t in zip(parts, tensor.split(sizes)):
                    getattr(part.kv, name)[i] = t
        return parts
