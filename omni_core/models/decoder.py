"""A decoder layer (attention, then a dense MLP or the sparse MoE) and the stack of them that the
thinker, talker and code predictor are: prefill, one-token steps (eager or compiled), and one
token for each of several requests with their own caches (`decode_rows`)."""

from __future__ import annotations

import torch
from torch import nn

from omni_core.models.config import DecoderConfig
from omni_core.models.layers import MLP, Attention, KVCache, RMSNorm, Rope
from omni_core.models.moe import SparseMoe


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
        self.token_step = None  # run_layers for one new token, compiled (fast/compiled.py); None: eager

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
        if self.token_step is not None and T == 1 and cache is not None:
            cache.reserve(start + 2)  # a spare slot: a step that fills the buffer exactly compiles again
            h = self.token_step(h, cos, sin, cache)
        else:
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
        (batch-invariant matmuls, attention per row). Compiled: each row takes the compiled
        one-token step, as it does alone."""
        if self.token_step is not None:
            return torch.cat([self(h[b:b + 1], cache, cache.length) for b, cache in enumerate(caches)])
        tables = [self.rope.table(c.length, 1, h.device, h.dtype) for c in caches]
        cos = torch.stack([t[0] for t in tables])[:, None]  # [B, 1, 1, D]: one position per row
        sin = torch.stack([t[1] for t in tables])[:, None]
        for layer in self.layers:
            h = layer.decode_rows(h, cos, sin, caches)
        for cache in caches:
            cache.advance(1)
        return self.norm(h)
