"""A decoder layer (attention, then a dense MLP or the sparse MoE) and the stack of them that the
thinker, talker and code predictor are: prefill; groups of rows alike packed into one call, each group
attending as a batch of its own (`forward_groups`, eager: the code predictor's two kinds; `prefill_rows`, the
prompt pieces of several requests with their own caches); and one token for each of several requests with
their own caches (`decode_rows`: eager, or one compiled call for all the rows)."""

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

    def decode_rows(self, h, cos, sin, caches: list[KVCache], index: int | None = None):
        """index: the layer's place in each cache (default: its own; 0 for a cache of this layer alone)."""
        index = self.index if index is None else index
        h = h + self.self_attn.decode_rows(self.input_layernorm(h), cos, sin, caches, index)
        return h + self.mlp(self.post_attention_layernorm(h))

    def grouped(self, h, cos, sin, groups: list[tuple]):
        h = h + self.self_attn.grouped(self.input_layernorm(h), cos, sin, groups, self.index)
        x = self.post_attention_layernorm(h)
        if isinstance(self.mlp, SparseMoe):  # its shared expert's gate: each group's rows a call of their own
            return h + self.mlp(x, [B * T for B, T, _ in groups])
        return h + self.mlp(x)


class DecoderStack(nn.Module):
    """layers + final norm; subclasses add the embedding the checkpoint names."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta, cfg.mrope_section)
        # layers_rows for B rows in one compiled call (fast/compiled.py: CompiledSteps); None: eager
        self.rows_step = None

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
        (batch-invariant matmuls, attention per row). Compiled (`rows_step`): one call for all the
        rows, padded to a batch bucket."""
        cos, sin = self.row_tables(caches, h)
        h = (self.rows_step or self.layers_rows)(h, cos, sin, caches)
        for cache in caches:
            cache.advance(1)
        return h

    def prefill_rows(self, pieces: list[torch.Tensor], caches: list[KVCache]) -> list[torch.Tensor]:
        """The next prompt piece of each of several requests with their own caches, in one call:
        pieces[b] [1, T_b, C] at positions caches[b].length.. → each one's normed hidden [1, T_b, C].
        The pieces are packed into one sequence [1, ΣT, C], each a group of one row (`forward_groups`): each
        piece attends over its own cache only, and its matmuls are calls of its own rows (the caller's
        `invariant.prompt_pieces`), so a piece's floats are those of its own `forward`.
        Eager (prompts are not compiled)."""
        sizes = [p.shape[1] for p in pieces]
        h = self.forward_groups(torch.cat(pieces, dim=1), [(1, T, cache) for T, cache in zip(sizes, caches)])
        return list(h.split(sizes, dim=1))

    def forward_groups(self, h: torch.Tensor, groups: list[tuple[int, int, KVCache | None]]) -> torch.Tensor:
        """Groups of rows alike in one call (`Attention.grouped`): h [1, N, C], the groups' rows packed group by
        group; groups: (B_g, T_g, cache or None): B_g rows of T_g new positions each, after their cache's
        positions (none: from position 0) → the normed hidden [1, N, C]; every cache advanced by its T_g."""
        tables = [self.rope.table(cache.length if cache else 0, T, h.device, h.dtype) for _, T, cache in groups]
        cos, sin = (torch.cat([t[i].expand(B, -1, -1).flatten(0, 1) for t, (B, _, _) in zip(tables, groups)])
                    [:, None] for i in (0, 1))  # [N, 1, D]: each packed position's
        for layer in self.layers:
            h = layer.grouped(h, cos, sin, groups)
        for _, T, cache in groups:
            if cache is not None:
                cache.advance(T)
        return self.norm(h)

    def row_tables(self, caches: list[KVCache], like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary cos, sin [B, 1, 1, D] of each row's next position (caches[b].length): new tensors."""
        tables = [self.rope.table(c.length, 1, like.device, like.dtype) for c in caches]
        return tuple(torch.stack([t[i][None] for t in tables]) for i in (0, 1))

    def layers_rows(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    caches: list[KVCache]) -> torch.Tensor:
        """`decode_rows`' layers and final norm (the caches are written, not advanced)."""
        for layer in self.layers:
            h = layer.decode_rows(h, cos, sin, caches)
        return self.norm(h)
