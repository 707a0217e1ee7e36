"""The Qwen3-Omni family's part of the load recipe (recipe.py): its config, tokenizer, modules and weights.

A checkpoint folder holds config.json (the whole model's: the speech path reads its thinker, talker and
code2wav parts), the tokenizer files and safetensors shards; only the speech path's tensors are read. A
'random:qwen3-omni-…' source builds the config and the tokenizer here and draws the weights
(random_weights.py). The same functions as loading/qwen3_tts.py, so the recipe asks the family once
(families/) and then reads straight through.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from omni_core.codec.code2wav import Code2Wav
from omni_core.loading import memory
from omni_core.loading.checkpoint import load_tokenizer, load_weights
from omni_core.loading.checkpoint import read_config as read_omni_config
from omni_core.models.config import OmniConfig
from omni_core.models.qwen3_omni.talker import Talker
from omni_core.models.qwen3_omni.thinker import Thinker
from omni_core.synthetic import presets

# Whether a CPU load that is not quantized names --quantize int8 with its measured one-row speed-up (the
# talker's matmuls); as before the families were split, only a Qwen3-TTS load does.
SUGGESTS_INT8 = False
HUB_FILES = None  # a hub repo's whole model is large: only the shards that hold the speech path (loading/hub.py)


def random_config(name: str, layers: int | None) -> OmniConfig:
    """A 'random:' preset's config at the real widths (layers: fewer thinker and talker layers)."""
    return presets.omni_config(layers)


def random_tokenizer():
    return presets.build_tokenizer()


def read_config(path: Path) -> OmniConfig:
    return read_omni_config(path)


def load_text_tokenizer(path: Path, from_hub: bool):
    return load_tokenizer(path)


def build_modules(cfg: OmniConfig) -> dict[str, nn.Module]:
    """The speech path's modules on the meta device (no storage yet)."""
    with torch.device("meta"):
        return {"thinker": Thinker(cfg.thinker), "talker": Talker(cfg), "code2wav": Code2Wav(cfg.codec)}


def plan(path: Path, cfg: OmniConfig, dtype: torch.dtype) -> memory.MemoryPlan:
    return memory.plan(path, dtype)


def load(modules: dict[str, nn.Module], path: Path, cfg: OmniConfig, device: torch.device, dtype: torch.dtype) -> None:
    load_weights(modules, path)
