"""Which family a source is, decided once at load: a checkpoint folder by its config.json's model_type, a
'random:' preset by its name; a loaded config by its `family`."""

from __future__ import annotations

import json
from pathlib import Path

from omni_core.families.qwen3_omni import Qwen3Omni
from omni_core.families.qwen3_tts import Qwen3TTS
from omni_core.synthetic import qwen3_tts as synthetic_tts

FAMILIES = {family.name: family for family in (Qwen3Omni, Qwen3TTS)}


def of_checkpoint(path: Path) -> type:
    """A checkpoint folder's family: Qwen3-TTS's config.json says model_type qwen3_tts; anything else is read
    as Qwen3-Omni (whose checks name what is missing)."""
    try:
        model_type = json.loads((path / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        model_type = None
    return of_model_type(model_type) or Qwen3Omni


def of_model_type(model_type: str | None) -> type | None:
    """The family of a config.json's model_type (None: neither)."""
    return next((family for family in FAMILIES.values() if family.model_type == model_type), None)


def of_random(name: str) -> type:
    """A 'random:<name>' preset's family (loading/random_weights.py checks the name)."""
    return Qwen3TTS if name in synthetic_tts.RANDOM else Qwen3Omni


def of_config(config) -> type:
    """The family of a loaded config (OmniConfig.family, TTSConfig.family)."""
    return FAMILIES[config.family]
