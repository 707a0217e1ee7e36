"""The load recipe (omni_core/loading/recipe.py): devices and dtypes resolved with clear errors, the
modules built on meta, and one recipe for a checkpoint ('tiny') and a 'random:' source."""

from __future__ import annotations

import pytest
import torch

from omni_core import CheckpointError
from omni_core.loading import recipe
from omni_core.models.config import OmniConfig
from omni_core.synthetic import tiny


@pytest.fixture(scope="module")
def cfg() -> OmniConfig:
    return OmniConfig.from_hf(tiny.hf_config("tiny").to_dict())


def test_devices():
    assert recipe.resolve_device("cpu") == torch.device("cpu")
    assert recipe.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(CheckpointError, match="unknown device 'gpu9': use 'auto', 'cpu' or 'cuda'"):
        recipe.resolve_device("gpu9")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_says_so():
    with pytest.raises(CheckpointError, match="device 'cuda' was asked for, but CUDA is not available here"):
        recipe.resolve_device("cuda")


def test_dtypes(cfg):
    assert recipe.resolve_dtype("auto", cfg) == torch.float32  # the tiny checkpoint's own dtype
    assert recipe.resolve_dtype("torch.bfloat16", cfg) == torch.bfloat16
    assert recipe.resolve_dtype(torch.float16, cfg) == torch.float16
    with pytest.raises(CheckpointError, match="unsupported dtype 'float64': use one of auto, float32, bfloat16, float16"):
        recipe.resolve_dtype("float64", cfg)


def test_modules_are_built_on_meta(cfg):
    modules = recipe.build_modules(cfg)
    assert set(modules) == {"thinker", "talker", "code2wav"}
    assert all(p.is_meta for m in modules.values() for p in m.parameters())


def test_one_recipe_for_a_checkpoint_and_a_random_source(monkeypatch, cfg):
    loaded = recipe.load_model("tiny", device="cpu", dtype="float32")
    assert set(loaded.modules) == {"thinker", "talker", "code2wav"} and loaded.random_weights
    assert loaded.source == "tiny" and loaded.dtype == torch.float32 and "tiny" in loaded.report
    # A 'random:' source at the tiny widths (the real ones need GBs): the preset's config and tokenizer.
    monkeypatch.setattr(recipe.presets, "omni_config", lambda layers: cfg)
    monkeypatch.setattr(recipe.presets, "build_tokenizer", tiny.build_tokenizer)
    drawn = recipe.load_model("random:qwen3-omni-30b-a3b?seed=3", device="cpu", dtype="float32")
    assert set(drawn.modules) == set(loaded.modules) and drawn.random_weights and drawn.config is cfg
    for name, module in drawn.modules.items():
        params = dict(module.named_parameters())
        assert params.keys() == dict(loaded.modules[name].named_parameters()).keys()
        assert not any(p.is_meta or p.requires_grad for p in params.values())
        assert not module.training
    weight = drawn.modules["talker"].codec_head.weight
    assert weight.std() > 0 and not torch.equal(weight, loaded.modules["talker"].codec_head.weight)
