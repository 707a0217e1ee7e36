"""Loading checkpoints written by `save_pretrained`: many shards, and broken ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from omni_core import CheckpointError, SpeechRequest, load_pipeline
from omni_core.synthetic.tiny import build_tokenizer

from .conftest import hf_reference, our_pipeline


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    """The tiny model saved by HF in many small shards."""
    path = tmp_path_factory.mktemp("sharded")
    hf_reference("tiny").save_pretrained(path, max_shard_size="300KB")
    build_tokenizer().save_pretrained(path)
    return path


def broken_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_many_shards_give_the_in_memory_outputs(sharded):
    assert len(list(sharded.glob("*.safetensors"))) > 20
    pipe = load_pipeline(str(sharded), device="cpu")
    request = SpeechRequest("Shards.", max_frames=6)
    want = our_pipeline("tiny").generate(request)
    got = pipe.generate(request)
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_array_equal(got.audio, want.audio)
    hf = hf_reference("tiny")
    ours = dict(pipe.talker.named_parameters())
    torch.testing.assert_close(ours["model.layers.1.mlp.experts.gate_up_proj"],
                               hf.talker.model.layers[1].mlp.experts.gate_up_proj, rtol=0, atol=0)


def test_dtype_auto_follows_the_checkpoint(sharded):
    assert load_pipeline(str(sharded), device="cpu").info["dtype"] == "float32"
    assert load_pipeline(str(sharded), device="cpu", dtype="bfloat16").info["dtype"] == "bfloat16"


def _first_shard(path: Path) -> Path:
    return sorted(path.glob("model-*.safetensors"))[0]


def _index(path: Path) -> dict:
    return json.loads((path / "model.safetensors.index.json").read_text())


def break_missing_config(p):
    (p / "config.json").unlink()
    return "config.json"


def break_other_model(p):
    cfg = json.loads((p / "config.json").read_text())
    cfg["model_type"] = "llama"
    (p / "config.json").write_text(json.dumps(cfg))
    return "not a Qwen3-Omni checkpoint"


def break_missing_tokenizer(p):
    (p / "tokenizer.json").unlink()
    return "tokenizer.json"


def break_truncated_shard(p):
    shard = _first_shard(p)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    return shard.name


def break_garbage_shard(p):
    shard = _first_shard(p)
    shard.write_bytes(b"\x00" * 64)
    return shard.name


def break_missing_shard(p):
    shard = _first_shard(p)
    shard.unlink()
    return shard.name


def break_tensor_missing_from_index(p):
    index = _index(p)
    name = "talker.code_predictor.lm_head.3.weight"
    del index["weight_map"][name]
    (p / "model.safetensors.index.json").write_text(json.dumps(index))
    return name


def break_misshapen_tensor(p):
    name = "thinker.model.layers.0.self_attn.q_proj.weight"
    shard = p / _index(p)["weight_map"][name]
    tensors = load_file(shard)
    tensors[name] = tensors[name][:-1]
    save_file(tensors, shard, metadata={"format": "pt"})
    return name


BREAKS = [break_missing_config, break_other_model, break_missing_tokenizer, break_truncated_shard,
          break_garbage_shard, break_missing_shard, break_tensor_missing_from_index, break_misshapen_tensor]


@pytest.mark.parametrize("breaker", BREAKS, ids=lambda f: f.__name__[len("break_"):])
def test_broken_checkpoint_names_the_problem(sharded, tmp_path, breaker):
    path = broken_copy(sharded, tmp_path / "ckpt")
    named = breaker(path)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")):
        load_pipeline(str(path), device="cpu")


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        load_pipeline(str(tmp_path / "nowhere"))
