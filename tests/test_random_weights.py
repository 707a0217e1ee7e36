"""`load_pipeline("random:qwen3-omni-30b-a3b")`: the real speech path without a checkpoint.

The full depth is ~68 GB (GPU only); here it is built on the meta device to count its
parameters, and built for real with the depth cut to one thinker and one talker layer
(~3.6 GB in bfloat16): it runs a request and has the published config's shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import CheckpointError, SpeechRequest, load_pipeline
from omni_core.synthetic import presets
from omni_core.codec.code2wav import Code2Wav
from omni_core.loading.random_weights import parse, plan
from omni_core.models.qwen3_omni.talker import Talker
from omni_core.models.qwen3_omni.thinker import Thinker

CUT = "random:qwen3-omni-30b-a3b?layers=1"


@pytest.fixture(scope="module")
def cut_pipeline():
    """The cut pipeline (~3.6 GB), shared by this file's tests and closed after them, so a worker does not hold
    it for the rest of the run."""
    pipe = load_pipeline(CUT, device="cpu", dtype="bfloat16")
    yield pipe
    pipe.close()


def test_source_syntax():
    name = "qwen3-omni-30b-a3b"
    assert parse(f"random:{name}") == {"name": name, "layers": None, "seed": presets.tiny.SEED}
    assert parse(f"random:{name}?layers=2&seed=7") == {"name": name, "layers": 2, "seed": 7}
    assert parse("random:qwen3-tts-0.6b?layers=1")["name"] == "qwen3-tts-0.6b"
    for bad, words in [("random:qwen9", "unknown random model"), ("random:qwen3-omni-30b-a3b?depth=2", "depth"),
                       ("random:qwen3-omni-30b-a3b?layers=x", "not an integer"),
                       ("random:qwen3-omni-30b-a3b?layers=0", "at least 1")]:
        with pytest.raises(CheckpointError, match=words):
            load_pipeline(bad, device="cpu")


def test_full_depth_is_the_published_size():
    cfg = presets.omni_config()
    assert (cfg.thinker.num_hidden_layers, cfg.talker.num_hidden_layers) == (48, 20)
    assert (cfg.predictor.num_hidden_layers, cfg.codec.transformer.num_hidden_layers) == (5, 8)
    assert presets.config_dict()["talker_config"]["accept_hidden_layer"] == 24 and cfg.torch_dtype == "bfloat16"
    assert presets.config_dict(1)["talker_config"]["accept_hidden_layer"] == 1  # still a valid layer index
    with torch.device("meta"):
        modules = {"thinker": Thinker(cfg.thinker), "talker": Talker(cfg), "code2wav": Code2Wav(cfg.codec)}
    need = plan(modules, torch.bfloat16)
    params = {p.name: p.params for p in need.parts}
    assert 30.0e9 < params["thinker"] < 31.0e9  # DESIGN.md: thinker text ≈ 30.5B
    assert 3.0e9 < params["talker"] < 3.6e9  # talker with its predictor ≈ 3.3B
    assert 0.1e9 < params["code2wav"] < 0.3e9
    assert 66e9 < need.weight_bytes < 70e9  # ≈ 68 GB in bfloat16


def test_cut_pipeline_has_the_config_shapes(cut_pipeline):
    pipe = cut_pipeline
    cfg = pipe.config
    assert pipe.random_weights and pipe.dtype == torch.bfloat16
    assert cfg.token_ids["im_start"] == 151644
    assert cfg.speakers == {"chelsie": 2301, "ethan": 2302, "aiden": 2303}
    th, tk, cp = pipe.thinker, pipe.talker, pipe.talker.code_predictor
    assert th.model.embed_tokens.weight.shape == (152064, 2048) and th.lm_head.weight.shape == (152064, 2048)
    assert len(th.model.layers) == 1 and len(tk.model.layers) == 1
    experts = th.model.layers[0].mlp.experts
    assert experts.gate_up_proj.shape == (128, 2 * 768, 2048) and experts.down_proj.shape == (128, 2048, 768)
    talker_mlp = tk.model.layers[0].mlp
    assert talker_mlp.experts.gate_up_proj.shape == (128, 2 * 384, 1024)
    assert sum(p.numel() for p in talker_mlp.shared_expert.parameters()) == 3 * 1024 * 768
    assert tk.codec_head.weight.shape == (3072, 1024)
    assert len(cp.model.layers) == 5 and len(cp.lm_head) == 15 and cp.lm_head[0].weight.shape == (2048, 1024)
    assert len(pipe.code2wav.pre_transformer.layers) == 8
    assert all(p.device.type == "cpu" and p.dtype == torch.bfloat16 for p in pipe.thinker.parameters())
    norm = th.model.layers[0].input_layernorm.weight
    assert torch.equal(norm, torch.ones_like(norm))
    assert 0.01 < experts.gate_up_proj[0].float().std().item() < 0.05  # 1/sqrt(2048) ≈ 0.022
    assert "total" in pipe.load_report


def test_cut_pipeline_runs_a_request(cut_pipeline):
    pipe = cut_pipeline
    result = pipe.generate(SpeechRequest("Real widths, random weights.", max_frames=3))
    assert result.codes.shape == (3, 16) and (0 <= result.codes).all() and (result.codes < 2048).all()
    assert len(result.audio) > 0 and np.isfinite(result.audio).all()
    assert result.prompt_ids[0] == 151644  # <|im_start|> at Qwen's id
