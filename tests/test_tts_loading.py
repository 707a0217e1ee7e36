"""Loading Qwen3-TTS (omni_core/loading/qwen3_tts.py, synthetic/qwen3_tts.py): a folder, a hub id with
its speech_tokenizer/, float32 and bfloat16, the memory plan, the pre-tokenizer rule, the presets."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from omni_core import CheckpointError, SpeechRequest, load_pipeline
from omni_core.loading import qwen3_tts as loading
from omni_core.synthetic.qwen3_tts import ensure_tiny_tts
from tests.conftest import _free_port
from tests.fake_hub import FakeHub, Repo
from tests.test_hub import load, snapshot
from tests.tts_oracle import checkpoint, our_tts

TEXT = "Hello hub"


@pytest.fixture(scope="module")
def tiny_tts():
    return load_pipeline("tiny-tts", device="cpu", dtype="float32")


def tts_repo() -> Repo:
    folder = ensure_tiny_tts()
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    return Repo({**files, "README.md": b"# tiny-tts\n"})


def test_hub_id_fetches_the_codec_folder_and_speaks_as_the_folder_does(tmp_path, tiny_tts):
    want = tiny_tts.generate(SpeechRequest(TEXT, max_frames=6)).codes.tolist()
    repo = tts_repo()
    with FakeHub({"org/tts": repo}) as hub:
        assert load(tmp_path, "org/tts", endpoint=hub.url)["org/tts"] == want
    got = sorted(str(p.relative_to(snapshot(tmp_path, "org/tts"))) for p in snapshot(tmp_path, "org/tts").rglob("*")
                 if p.is_file())
    assert "speech_tokenizer/model.safetensors" in got and "speech_tokenizer/config.json" in got
    assert "README.md" not in got
    closed = f"http://127.0.0.1:{_free_port()}"
    assert load(tmp_path, "org/tts", endpoint=closed, offline=True)["org/tts"] == want


def test_memory_plan_counts_every_part():
    path = checkpoint("base")
    plan = loading.plan(path, loading.read_config(path), torch.bfloat16)
    parts = {p.name: p.params for p in plan.parts}
    assert set(parts) == {"talker", "codec decoder", "codec encoder", "speaker encoder"}
    pipe = our_tts("base")
    held = {"talker": pipe.talker, "codec decoder": pipe.code2wav.decoder, "codec encoder": pipe.code2wav.encoder,
            "speaker encoder": pipe.speaker_encoder}
    for name, module in held.items():
        weights = sum(t.numel() for t in module.state_dict().values())  # the Mimi codebooks are buffers
        # the file's decoder.* also holds the quantizers' input projections, which only encoding uses
        assert weights <= parts[name] <= 1.01 * weights, name
    assert plan.weight_bytes == 2 * plan.params


def test_bfloat16_loads_and_speaks(tiny_tts):
    pipe = load_pipeline("tiny-tts", device="cpu", dtype="bfloat16")
    assert pipe.talker.codec_head.weight.dtype == torch.bfloat16 and pipe.code2wav.dtype == torch.bfloat16
    result = pipe.generate(SpeechRequest(TEXT, max_frames=4))
    assert result.codes.shape == (4, 16) and np.isfinite(result.audio).all() and len(result.audio) == 4 * 1920
    assert pipe.encode(result.audio, 24000).shape == (4, 16)


def test_random_real_width_presets_build_without_files():
    # Exact mode: what a random preset builds does not depend on the matmul plans, and the default mode's probing of
    # 1.7B's bfloat16 shapes took 70 s of this test on an AVX2-only CPU (the planner: test_plans.py, test_invariant.py).
    pipe = load_pipeline("random:qwen3-tts-1.7b?layers=1", device="cpu", dtype="bfloat16", exact=True)
    cfg = pipe.config
    assert (cfg.talker.hidden_size, cfg.predictor.hidden_size, cfg.size) == (2048, 1024, "1b7")
    assert pipe.talker.code_predictor.small_to_mtp_projection is not None
    assert pipe.info["instruct"] and not pipe.info["can_encode"]
    result = pipe.generate(SpeechRequest(TEXT, instruct="Slowly.", max_frames=2))
    assert result.codes.shape == (2, 16)


@pytest.mark.parametrize("version, vocab, hub, mistral", [
    ("4.57.3", 151643, False, True), (None, 151643, False, True), ("4.57.1", 151643, False, False),
    ("5.0.0", 151643, False, False), ("4.57.3", 151643, True, False), ("4.57.3", 5000, False, False),
])
def test_pre_tokenizer_rule_follows_the_package(tmp_path, version, vocab, hub, mistral):
    config = {"model_type": "qwen3_tts"} | ({"transformers_version": version} if version else {})
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert loading.uses_mistral_split(tmp_path, vocab, hub) is mistral


def test_the_oracle_checkpoint_gets_the_mistral_split():
    tok = our_tts("custom_voice").tokenizer
    ids = tok("HelloWorld")["input_ids"]
    assert [tok.decode([i]) for i in ids] == ["Hello", "W", "o", "r", "l", "d"]


def test_broken_checkpoints_name_the_problem(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(ensure_tiny_tts(), folder)
    config = json.loads((folder / "config.json").read_text())
    del config["talker_config"]["spk_is_dialect"]["dylan"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="spk_is_dialect has no entry for dylan"):
        load_pipeline(folder, device="cpu")
    shutil.rmtree(folder / "speech_tokenizer")
    with pytest.raises(CheckpointError, match="speech_tokenizer/config.json is missing"):
        load_pipeline(folder, device="cpu")
