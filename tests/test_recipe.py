"""The load recipe (omni_core/loading/recipe.py): devices and dtypes resolved with clear errors, the
modules built on meta, and one recipe for a checkpoint ('tiny') and a 'random:' source."""

from __future__ import annotations

import pytest
import torch

from omni_core import CheckpointError
from omni_core.loading import qwen3_omni, recipe
from omni_core.models.config import OmniConfig
from omni_core.synthetic import presets, tiny


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


def test_auto_is_float32_on_a_cpu_without_fast_half_kernels(cfg, monkeypatch):
    """A bfloat16 checkpoint on a CPU without native bfloat16 (this project's AMD EPYC: a Qwen3-TTS 0.6B
    frame 5.3 s in bfloat16, 2.0 s in float32) loads as float32 under auto; asked for by name, as asked."""
    half = OmniConfig.from_hf({**tiny.hf_config("tiny").to_dict(), "torch_dtype": "bfloat16"})
    assert recipe.fast_on_cpu(torch.float32)
    assert recipe.fast_on_cpu(torch.bfloat16) == torch.ops.mkldnn._is_mkldnn_bf16_supported()  # oneDNN's own check
    cpu = torch.device("cpu")
    for fast, want in ((False, torch.float32), (True, torch.bfloat16)):
        monkeypatch.setattr(recipe, "fast_on_cpu", lambda dtype, fast=fast: fast)
        assert recipe.resolve_dtype("auto", half, cpu) == want
        assert recipe.resolve_dtype("bfloat16", half, cpu) == torch.bfloat16
        assert recipe.resolve_dtype("auto", half) == torch.bfloat16  # no device: the checkpoint's
        assert recipe.resolve_dtype("auto", cfg, cpu) == torch.float32


def test_auto_keeps_the_checkpoints_half_dtype_where_float32_would_not_fit(cfg, monkeypatch):
    from omni_core.loading import memory

    half = OmniConfig.from_hf({**tiny.hf_config("tiny").to_dict(), "torch_dtype": "bfloat16"})
    monkeypatch.setattr(recipe, "fast_on_cpu", lambda dtype: False)
    size = {torch.float32: 4 * 2**30, torch.bfloat16: 2 * 2**30}  # weight bytes at each dtype

    def needs_at(dt):
        return memory.MemoryPlan((memory.Part("talker", size[dt] // 4, size[dt]),), dt)

    cpu = torch.device("cpu")
    for free, want in ((8 * 2**30, torch.float32), (3 * 2**30, torch.bfloat16)):
        monkeypatch.setattr(memory, "free_bytes", lambda device, free=free: free)
        dt, needs = recipe.choose_dtype("auto", half, cpu, needs_at)
        assert dt == needs.dtype == want


def test_a_load_says_when_auto_chose_float32(monkeypatch):
    from omni_core.loading import memory

    monkeypatch.setattr(recipe, "fast_on_cpu", lambda dtype: False)
    # float32 fits (else auto keeps bfloat16, rightly): the machine's free memory is not this test's subject
    monkeypatch.setattr(memory, "free_bytes", lambda device: 64 * 2**30)
    loaded = recipe.load_model("random:qwen3-tts-0.6b?layers=1", device="cpu")
    assert loaded.dtype == torch.float32
    assert "the checkpoint is bfloat16; this CPU has no fast bfloat16 kernels, so auto chose float32" in loaded.report
    packed = sum(getattr(m, "packed", None) is not None for root in loaded.modules.values() for m in root.modules())
    assert (f"{packed} matmuls through oneDNN" in loaded.report) == (packed > 0)


def test_modules_are_built_on_meta(cfg):
    modules = qwen3_omni.build_modules(cfg)
    assert set(modules) == {"thinker", "talker", "code2wav"}
    assert all(p.is_meta for m in modules.values() for p in m.parameters())


def test_one_recipe_for_a_checkpoint_and_a_random_source(monkeypatch, cfg):
    loaded = recipe.load_model("tiny", device="cpu", dtype="float32")
    assert set(loaded.modules) == {"thinker", "talker", "code2wav"} and loaded.random_weights
    assert loaded.source == "tiny" and loaded.dtype == torch.float32 and "tiny" in loaded.report
    # A 'random:' source at the tiny widths (the real ones need GBs): the preset's config and tokenizer.
    monkeypatch.setattr(presets, "omni_config", lambda layers: cfg)
    monkeypatch.setattr(presets, "build_tokenizer", tiny.build_tokenizer)
    drawn = recipe.load_model("random:qwen3-omni-30b-a3b?seed=3", device="cpu", dtype="float32")
    assert set(drawn.modules) == set(loaded.modules) and drawn.random_weights and drawn.config is cfg
    for name, module in drawn.modules.items():
        params = dict(module.named_parameters())
        assert params.keys() == dict(loaded.modules[name].named_parameters()).keys()
        assert not any(p.is_meta or p.requires_grad for p in params.values())
        assert not module.training
    weight = drawn.modules["talker"].codec_head.weight
    assert weight.std() > 0 and not torch.equal(weight, loaded.modules["talker"].codec_head.weight)
