"""The thinker: Qwen3-Omni's MoE LLM, text in, text out (seed M08).

Prefill once, then one token per step against a KV cache; the position of a new
token always equals the cache length.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from .config import DecoderConfig
from .layers import DecoderStack, KVCache, Linear
from .sampling import SamplingConfig, choose


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
        hidden, _ = self.model(self.embed(ids), cache, start)
        return self.lm_head(hidden)

    @torch.no_grad()
    def generate(self, prompt_ids: torch.Tensor, max_new_tokens: int, eos_id: int,
                 sampling: SamplingConfig = SamplingConfig(), generator: torch.Generator | None = None
                 ) -> Iterator[int]:
        """Yield up to `max_new_tokens` ids (the EOS included, then stop). prompt_ids: [1, T]."""
        cache = self.model.new_cache(1, prompt_ids.shape[1] + max_new_tokens, like=self.lm_head.weight)
        logits = self(prompt_ids, cache)[:, -1]  # prefill gives the first token
        for n in range(max_new_tokens):
            token, _ = choose(logits, sampling, generator)
            token_id = int(token)
            yield token_id
            if token_id == eos_id or n + 1 == max_new_tokens:
                return
            logits = self(token[:, None], cache)[:, -1]
