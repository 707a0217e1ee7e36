"""The memory check (omni_core/memory.py): bytes from the shards' headers, refused before
loading when the device's free memory (here a budget the test sets) cannot hold them."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from omni_core import CheckpointError, load_pipeline
from omni_core.loading import memory
from omni_core.synthetic.tiny import ensure_tiny
from tests.conftest import our_pipeline


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plan_counts_exactly_what_is_loaded(preset, dtype):
    pipe = our_pipeline(preset)
    plan = memory.plan(ensure_tiny(preset), dtype)
    loaded = {"thinker": pipe.thinker, "talker": pipe.talker, "code2wav": pipe.code2wav}
    assert {p.name: p.params for p in plan.parts} == {
        name: sum(t.numel() for t in m.parameters()) for name, m in loaded.items()}
    assert plan.weight_bytes == plan.params * dtype.itemsize


def test_the_towers_are_not_counted():
    index = json.loads((ensure_tiny("tiny") / "model.safetensors.index.json").read_text())
    plan = memory.plan(ensure_tiny("tiny"), torch.float32)
    towers = index["metadata"]["total_parameters"] - plan.params
    assert towers > 0 and plan.need > plan.weight_bytes


def budget(monkeypatch, free: int) -> None:
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)


def test_refuses_what_does_not_fit_with_both_numbers(monkeypatch):
    budget(monkeypatch, 10**6)
    need = memory.plan(ensure_tiny("tiny"), torch.float32).need
    with pytest.raises(CheckpointError) as e:
        load_pipeline("tiny", device="cpu")
    message = str(e.value)
    assert f"needs {memory.size(need)} on cpu" in message and "only 1.0 MB is free" in message
    assert "--device" in message and "more memory" in message and "--force" in message


def test_force_loads_anyway_and_says_so(monkeypatch, caplog):
    budget(monkeypatch, 10**6)
    with caplog.at_level(logging.INFO, logger="omni_core"):
        pipe = load_pipeline("tiny", device="cpu", force=True)
    assert "--force: the speech path needs" in caplog.text
    assert pipe.load_report in caplog.text


def test_the_load_report(monkeypatch):
    budget(monkeypatch, 10**10)
    report = load_pipeline("tiny-b", device="cpu", dtype="bfloat16").load_report
    assert report.startswith("loaded tiny-b on cpu as bfloat16 in ")
    for part in ("thinker", "talker", "code2wav", "total"):
        assert f"{part} " in report
    assert "10.0 GB was free" in report


def test_free_memory_is_measured_on_this_machine():
    assert memory.free_bytes(torch.device("cpu")) > 0


def test_a_bad_shard_header_names_the_shard(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-1.safetensors"}}))
    (tmp_path / "model-1.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(CheckpointError, match="model-1.safetensors is corrupt or truncated"):
        memory.plan(tmp_path, torch.float32)
