"""Full-size pipelines without a checkpoint: `load_pipeline("random:qwen3-omni-30b-a3b")`.

The modules are built from synthetic/presets.py's config on the meta device, given storage of
the target dtype on the target device, and filled there with seeded random values
(no files, no host copy of the thinker: ~68 GB in bfloat16 at full depth, for GPU
benchmarks). Source syntax:

    random:qwen3-omni-30b-a3b             the published depths: 48 thinker, 20 talker layers
    random:qwen3-omni-30b-a3b?layers=N    thinker and talker cut to N layers (CPU tests);
                                          the 5-layer predictor and 8-layer Code2Wav stay
    random:...?seed=S                     another draw of the weights (default tiny.SEED)
    random:qwen3-tts-0.6b, -1.7b          Qwen3-TTS CustomVoice at its real widths (synthetic/qwen3_tts.py;
                                          layers=N cuts the talker), the codec without its encoder

The weights (synthetic/weights.fill_random) follow synthetic/tiny.py's spread (std 1/sqrt(fan_in), norms 1, biases 0, the codec
as `tiny.spread_codec`), so routing, attention and codes vary as in the tiny model.
The tokenizer is presets.build_tokenizer (Qwen's special ids, byte-level text).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import torch
from torch import nn

from omni_core.loading import memory
from omni_core.models.config import CheckpointError
from omni_core.synthetic import presets, qwen3_tts, tiny

PREFIX = "random:"
NAMES = (presets.NAME, *qwen3_tts.RANDOM)


def is_random(source) -> bool:
    return str(source).startswith(PREFIX)


def parse(source: str) -> dict:
    """'random:<name>[?layers=N&seed=S]' → {"name": name, "layers": N or None, "seed": S}."""
    parts = urlsplit(str(source)[len(PREFIX):])
    if parts.path not in NAMES:
        raise CheckpointError(f"unknown random model {parts.path!r} in {source!r}: use "
                              + " or ".join(f"'{PREFIX}{n}'" for n in NAMES))
    options = {"layers": None, "seed": tiny.SEED}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in options:
            raise CheckpointError(f"unknown option {key!r} in {source!r}: use layers=N, seed=S")
        try:
            options[key] = int(value)
        except ValueError:
            raise CheckpointError(f"option {key}={value!r} in {source!r} is not an integer") from None
    if options["layers"] is not None and options["layers"] < 1:
        raise CheckpointError(f"layers must be at least 1 in {source!r}")
    return {"name": parts.path, **options}


def plan(modules: dict[str, nn.Module], dtype: torch.dtype) -> memory.MemoryPlan:
    """The memory plan of modules built on the meta device (their parameters, at `dtype`)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in modules.items()}
    return memory.MemoryPlan(tuple(memory.Part(n, c, c * itemsize) for n, c in counts.items()), dtype)
