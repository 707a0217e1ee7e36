"""The thinker: Qwen3-Omni's MoE LLM, text in, text out (seed M08).

Prefill once (`forward`), then one token per step against a KV cache (`decode_rows`,
batched across requests by the engine); a new token's position is its cache length.
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.models.config import DecoderConfig
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import KVCache, Linear


class ThinkerModel(DecoderStack):
    def __init__(self, cfg: DecoderConfig):
        super().__init__(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)


class Thinker(nn.Module):
    """thinker.model.* and thinker.lm_head"""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.model = ThinkerModel(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(ids)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """ids [B, T] at positions cache.length.. → logits [B, T, V]."""
        start = cache.length if cache is not None else 0
        return self.lm_head(self.model(self.embed(ids), cache, start))

    @torch.no_grad()
    def decode_rows(self, ids: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """One token for each of B replies, each with its own cache: ids [B] → logits [B, V]."""
        return self.lm_head(self.model.decode_rows(self.embed(ids)[:, None], caches))[:, 0]
