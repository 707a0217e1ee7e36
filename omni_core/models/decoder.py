"""A decoder layer (attention, then a dense MLP or the sparse MoE) and the stack of them that the
thinker, talker and code predictor are: prefill, and one token for each of several requests with
their own caches (`decode_rows`: eager, or compiled as one call for a bucket of rows)."""

from __future__ import annotations

import torch
from torch import nn

from omni_core.fast.buckets import BUCKETS, bucket, buckets_up_to, chunks
from omni_core.models.config import DecoderConfig
from omni_core.models.layers import MLP, Attention, KVCache, RMSNorm, Rope
from omni_core.models.moe import SparseMoe


# The filled length of a padding row's cache (fixed: its writes land on the same slot every step).
SPARE_LENGTH = 2


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig, index: int):
        super().__init__()
        self.index = index
        self.self_attn = Attention(cfg)
        self.mlp = SparseMoe(cfg) if cfg.is_moe_layer(index) else MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos, sin, cache: KVCache | None = None, mask=None):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache, self.index, mask)
        return h + self.mlp(self.post_attention_layernorm(h))

    def decode_rows(self, h, cos, sin, caches: list[KVCache]):
        h = h + self.self_attn.decode_rows(self.input_layernorm(h), cos, sin, caches, self.index)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderStack(nn.Module):
    """layers + final norm; subclasses add the embedding the checkpoint names."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
        self.rows_step = None  # layers_rows for a bucket of rows, compiled (fast/compiled.py); None: eager
        self._spares: list[KVCache] = []  # the caches of the zero rows that pad a compiled call to its bucket

    def new_cache(self, batch: int, capacity: int, like: torch.Tensor) -> KVCache:
        c = self.cfg
        return KVCache(c.num_hidden_layers, batch, c.num_key_value_heads, c.head_dim, capacity, like.dtype,
                       like.device)

    def forward(self, h: torch.Tensor, cache: KVCache | None = None, start: int = 0) -> torch.Tensor:
        """h: [B, T, C] input embeddings at positions start..start+T-1 → the normed last hidden [B, T, C]."""
        T = h.shape[1]
        if cache is not None:
            assert start == cache.length, f"position {start} != cache length {cache.length}"
        cos, sin = self.rope.table(start, T, h.device, h.dtype)
        h = self.run_layers(h, cos, sin, cache)
        if cache is not None:
            cache.advance(T)
        return h

    def run_layers(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   cache: KVCache | None = None) -> torch.Tensor:
        """The layers and the final norm (the cache is written, not advanced)."""
        for layer in self.layers:
            h = layer(h, cos, sin, cache)
        return self.norm(h)

    def decode_rows(self, h: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """One new token for each of B requests with their own caches: h [B, 1, C] → [B, 1, C].
        Row b sits at position caches[b].length. A row's floats do not depend on the other rows
        (batch-invariant matmuls, attention per row). Compiled: one call for all rows, padded to
        their bucket (a lone row is bucket 1: every row, alone or not, runs the same function)."""
        cos, sin = self.row_tables(caches, h)
        if self.rows_step is not None and h.shape[0] <= BUCKETS[-1]:
            h = self._compiled_rows(h, cos, sin, caches)
        elif self.rows_step is not None:  # more rows than the largest bucket: bucket-size chunks
            h = torch.cat([self._compiled_rows(h[rows], cos[rows], sin[rows], caches[rows])
                           for rows in chunks(h.shape[0])])
        else:
            h = self.layers_rows(h, cos, sin, caches)
        for cache in caches:
            cache.advance(1)
        return h

    def row_tables(self, caches: list[KVCache], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary cos, sin [B, 1, 1, D] of each row's next position (caches[b].length)."""
        tables = [self.rope.table(c.length, 1, like.device, like.dtype) for c in caches]
        return tuple(torch.stack([t[i][None] for t in tables]) for i in (0, 1))

    def layers_rows(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """`decode_rows`' layers and final norm (the caches are written, not advanced)."""
        for layer in self.layers:
            h = layer.decode_rows(h, cos, sin, caches)
        return self.norm(h)

    def _compiled_rows(self, h, cos, sin, caches: list[KVCache]) -> torch.Tensor:
        """`rows_step` over B rows padded with zero rows to their bucket, each padding row with a spare cache
        of its own (written, never advanced) → [B, 1, C]."""
        B = h.shape[0]
        pad = bucket(B) - B
        for cache in caches:
            cache.reserve(cache.length + 2)  # a spare slot: a step that fills the buffer exactly compiles again
        # Zero rows after them, [bucket, ...]; and never views (dynamo would guard what they view)
        h, cos, sin = (torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) if pad or t._base is not None else t
                       for t in (h, cos, sin))
        return self.rows_step(h, cos, sin, caches + self.spare_caches(pad, h))[:B]

    def warm_up_rows(self, max_rows: int) -> None:
        """Compile `rows_step` for every bucket a batch of up to max_rows rows uses, on caches of its own."""
        like = self.norm.weight
        for size in buckets_up_to(max_rows):
            caches = [self.new_cache(1, SPARE_LENGTH + 3, like) for _ in range(size)]
            for cache in caches:
                cache.length = SPARE_LENGTH + 1
            h = torch.zeros(size, 1, self.cfg.hidden_size, dtype=like.dtype, device=like.device)
            self._compiled_rows(h, *self.row_tables(caches, h), caches)

    def spare_caches(self, n: int, like: torch.Tensor) -> list[KVCache]:
        """n caches for padding rows (length SPARE_LENGTH: past 0 and 1, which compile as constants)."""
        if self._spares and (self._spares[0].k[0].dtype, self._spares[0].k[0].device) != (like.dtype, like.device):
            self._spares = []
        while len(self._spares) < n:
            cache = self.new_cache(1, SPARE_LENGTH + 2, like)
            cache.length = SPARE_LENGTH
            self._spares.append(cache)
        return self._spares[:n]
