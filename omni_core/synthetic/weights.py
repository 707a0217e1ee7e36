"""Seeded random weights for the models made here, drawn in place.

`fill_random` draws the 'random:' sources' weights (loading/random_weights.py) on each parameter's
own device; `spread`, `spread_codec` and `mimi_encoder` seed the Qwen3-TTS modules written to disk
(synthetic/qwen3_tts.py). The spreads keep logits, routing and codes varied, as in the tiny model.
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.synthetic import tiny


@torch.no_grad()
def fill_random(modules: dict[str, nn.Module], seed: int = tiny.SEED) -> None:
    """Seeded random weights, drawn on each parameter's own device and in its own dtype."""
    for i, (prefix, module) in enumerate(sorted(modules.items())):
        if prefix == "code2wav":  # CPU draws, copied over: 0.1-0.2B parameters
            if hasattr(module, "encode"):  # Qwen3-TTS's codec
                spread_codec(module.decoder, torch.Generator().manual_seed(seed + 100))
            else:
                tiny.spread_codec(module, seed + 100)
            continue
        device = next(module.parameters()).device
        gen = torch.Generator(device=device).manual_seed(seed + 100 + i)
        for name, p in module.named_parameters():
            if p.dim() >= 2:  # [out, in], [experts, out, in], embeddings [vocab, hidden]
                p.normal_(0.0, p.shape[-1] ** -0.5, generator=gen)
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            else:  # biases
                p.zero_()


@torch.no_grad()
def spread(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Matrices ~ N(0, 1/fan_in), norm weights near 1, biases small: logits spread, codes vary."""
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            tiny.draw(p, gen, p[0].numel() ** -0.5)
        elif name.endswith(("norm.weight", "layernorm.weight")):
            tiny.draw(p, gen, 0.1, 1.0)
        else:
            tiny.draw(p, gen, 0.1)


@torch.no_grad()
def spread_codec(decoder: torch.nn.Module, gen: torch.Generator) -> None:
    """Like tiny.spread_codec, plus codebooks of unit spread with positive usage counts."""
    for name, p in decoder.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "embedding_sum":
            tiny.draw(p, gen)
        elif leaf == "cluster_usage":
            p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
    codebooks = frozenset(n for n, _ in decoder.named_parameters() if n.endswith(("embedding_sum", "cluster_usage")))
    tiny.spread_codec(decoder, int(torch.randint(0, 2**31, (1,), generator=gen)), skip=codebooks)


@torch.no_grad()
def mimi_encoder(cfg, gen: torch.Generator):
    """transformers' MimiModel (encoder half) with seeded weights and codebook statistics."""
    from transformers import MimiConfig, MimiModel

    model = MimiModel(MimiConfig(**cfg.encoder))
    model.decoder = None
    spread(model, gen)  # layer scales, LayerNorms and biases too: all O(1) or small
    for name, b in model.named_buffers():  # the codebooks' statistics (the rest are derived tables)
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "embed_sum":
            b.copy_(torch.randn(b.shape, generator=gen))
        elif leaf == "cluster_usage":
            b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
        elif leaf == "initialized":
            b.fill_(1.0)
    return model.eval()
