"""The Qwen3-TTS family's part of the load recipe (recipe.py): its modules, weights and tokenizer.

A checkpoint folder holds config.json (model_type qwen3_tts), generation_config.json,
model.safetensors (`talker.*`, and `speaker_encoder.*` for Base models), the Qwen2 tokenizer
files and `speech_tokenizer/` (the codec: config.json, model.safetensors with `decoder.*`
and `encoder.*`, preprocessor_config.json).

The tokenizer's pre-tokenizer follows the package: it loads the tokenizer with
`fix_mistral_regex=True`, which under its transformers 4.57.3 swaps Qwen2's split regex for
Mistral's when the base vocabulary exceeds 100000 entries and the source is a local folder
whose config.json has no `transformers_version` or one in (4.57.2, 5.0.0); loaded by hub id,
the split stays (docs/QWEN3_TTS.md, "The text tokenizer's pre-tokenizer").
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from omni_core.codec.qwen3_tts import TTSCodec, build_encoder
from omni_core.loading import memory
from omni_core.loading.checkpoint import load_tokenizer, load_weights, weight_map
from omni_core.models.config import CheckpointError
from omni_core.models.qwen3_tts.config import TTSConfig, read_tts_config
from omni_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder
from omni_core.models.qwen3_tts.talker import Talker
from omni_core.synthetic import presets
from omni_core.synthetic import qwen3_tts as synthetic_tts

CODEC_DIR = "speech_tokenizer"
# A hub repo (a few GB at most) is fetched whole: the weights (one file or shards) and the codec in
# speech_tokenizer/, which the official package also fetches on its own (`allow_patterns=["speech_tokenizer/*"]`).
HUB_FILES = ["*.safetensors", CODEC_DIR + "/*"]
MISTRAL_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# A CPU load that is not quantized names --quantize int8 with its measured one-row speed-up (the talker's
# matmuls are the whole model's decode).
SUGGESTS_INT8 = True


def random_config(name: str, layers: int | None) -> TTSConfig:
    """A 'random:qwen3-tts-…' preset's config (layers: fewer talker layers)."""
    return synthetic_tts.tts_config(name, layers)


def random_tokenizer():
    return presets.build_tokenizer()


def read_config(path: Path) -> TTSConfig:
    return read_tts_config(path)


def build_modules(cfg: TTSConfig) -> dict[str, nn.Module]:
    """On the meta device: the talker (with its predictor), the codec's decoder, the speaker encoder."""
    with torch.device("meta"):
        modules = {"talker": Talker(cfg), "code2wav": TTSCodec(cfg.codec)}
        if cfg.speaker_encoder is not None:
            modules["speaker_encoder"] = SpeakerEncoder(cfg.speaker_encoder)
    return modules


def memory_parts(path: Path, cfg: TTSConfig) -> dict[str, tuple[Path, str]]:
    """Every part the pipeline holds, for the memory check: name → (folder, tensor prefix)."""
    parts = {"talker": (path, "talker."), "codec decoder": (path / CODEC_DIR, "decoder.")}
    if cfg.codec.encoder is not None:
        parts["codec encoder"] = (path / CODEC_DIR, "encoder.")
    if cfg.speaker_encoder is not None:
        parts["speaker encoder"] = (path, "speaker_encoder.")
    return parts


def plan(path: Path, cfg: TTSConfig, dtype: torch.dtype) -> memory.MemoryPlan:
    return memory.plan(path, dtype, memory_parts(path, cfg))


def load(modules: dict[str, nn.Module], path: Path, cfg: TTSConfig, device: torch.device, dtype: torch.dtype) -> None:
    """Fill the materialized modules from the folder; attach the codec's encoder when it has one."""
    load_weights({k: m for k, m in modules.items() if k != "code2wav"}, path)
    codec = modules["code2wav"]
    load_weights({"decoder": codec.decoder}, path / CODEC_DIR)
    if cfg.codec.encoder is not None:
        codec.encoder = build_encoder(cfg.codec, encoder_state(path / CODEC_DIR), device, dtype)


def encoder_state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    state = {}
    for name, shard in weight_map(folder).items():
        if name.startswith("encoder."):
            with safe_open(str(shard), framework="pt", device="cpu") as f:
                state[name[len("encoder."):]] = f.get_tensor(name)
    return state


def load_text_tokenizer(path: Path, from_hub: bool):
    """The checkpoint's Qwen2 tokenizer, with the split the package gets for this source."""
    tokenizer = load_tokenizer(path)
    if uses_mistral_split(path, tokenizer.vocab_size, from_hub):
        from tokenizers import Regex, pre_tokenizers
        try:
            tokenizer.backend_tokenizer.pre_tokenizer[0] = pre_tokenizers.Split(Regex(MISTRAL_SPLIT), "isolated")
        except (TypeError, IndexError) as e:
            raise CheckpointError(f"the tokenizer in {path} has no split pre-tokenizer to replace: {e}") from None
    return tokenizer


def uses_mistral_split(path: Path, vocab_size: int, from_hub: bool) -> bool:
    """transformers 4.57.3's `_patch_mistral_regex` with fix_mistral_regex=True, for a qwen3_tts config."""
    from packaging import version

    if from_hub or vocab_size <= 100000:
        return False
    written = json.loads((path / "config.json").read_text()).get("transformers_version")
    if not written:
        return True
    v = version.parse(written)
    return version.parse("4.57.2") < v < version.parse("5.0.0")
