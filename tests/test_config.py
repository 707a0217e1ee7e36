"""Model configuration (omni_core/models/config.py): a Qwen3-Omni config.json parsed once into frozen
dataclasses, and a bad or missing field refused with a CheckpointError that names it."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from omni_core import CheckpointError
from omni_core.models.config import DecoderConfig, OmniConfig
from omni_core.synthetic import presets, tiny


def real() -> dict:
    return presets.config_dict()


def test_the_published_config_parses_to_its_values():
    cfg = OmniConfig.from_hf(real())
    assert (cfg.thinker.hidden_size, cfg.thinker.num_hidden_layers, cfg.thinker.num_experts) == (2048, 48, 128)
    assert cfg.talker.num_experts == 128  # from num_local_experts
    assert cfg.thinker.mrope_section == (24, 20, 20) and cfg.predictor.mrope_section is None
    assert cfg.codec.samples_per_frame == 1920 and cfg.codec.transformer.sliding_window == 72
    assert cfg.codec.transformer.rms_norm_eps == 1e-5 and cfg.torch_dtype == "bfloat16"
    assert cfg.speakers == tiny.SPEAKERS and cfg.codec_ids == tiny.CODEC_IDS
    assert cfg.token_ids["im_end"] == presets.TOKEN_IDS["<|im_end|>"] and cfg.num_code_groups == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_code_groups = 8


def test_moe_layers_follow_sparse_step_and_mlp_only_layers():
    d = DecoderConfig.from_hf(dict(hidden_size=8, num_hidden_layers=4, num_attention_heads=2, num_experts=4,
                                   decoder_sparse_step=2, mlp_only_layers=[3]))
    assert [d.is_moe_layer(i) for i in range(4)] == [False, True, False, False]
    assert d.head_dim == 4 and d.num_key_value_heads == 2  # defaults from the heads
    assert not DecoderConfig.from_hf(dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2)).is_moe_layer(0)


def broken(path: tuple, value=None, delete: bool = False) -> dict:
    d = real()
    *parents, leaf = path
    node = d
    for key in parents:
        node = node[key]
    if delete:
        del node[leaf]
    else:
        node[leaf] = value
    return d


@pytest.mark.parametrize("d, message", [
    (broken(("model_type",), "llama"), "model_type 'llama', not 'qwen3_omni_moe'"),
    (broken(("talker_config",), delete=True), "lacks 'talker_config'"),
    (broken(("thinker_config", "text_config"), delete=True), "lacks 'text_config'"),
    (broken(("talker_config", "code_predictor_config"), delete=True), "lacks 'code_predictor_config'"),
    (broken(("talker_config", "text_config", "num_key_value_heads"), 3), "not a multiple of num_key_value_heads 3"),
    (broken(("thinker_config", "text_config", "rope_parameters", "mrope_section"), [24, 20, 21]),
     "mrope_section"),
    (broken(("talker_config", "num_code_groups"), 8), "num_code_groups 8 != code2wav num_quantizers 16"),
    (broken(("talker_config", "text_config", "vocab_size"), 2048), "vocab_size must be at least"),
])
def test_a_bad_field_is_a_checkpoint_error_naming_it(d, message):
    with pytest.raises(CheckpointError, match=message):
        OmniConfig.from_hf(d)


@pytest.mark.parametrize("path", [("im_end_token_id",), ("talker_config", "codec_bos_id"),
                                  ("thinker_config", "text_config", "hidden_size")])
def test_a_missing_id_or_size_is_a_checkpoint_error_naming_it(path):
    with pytest.raises(CheckpointError, match=path[-1]):
        OmniConfig.from_hf(broken(path, delete=True))


def test_the_input_dict_is_not_changed():
    d = real()
    before = copy.deepcopy(d)
    OmniConfig.from_hf(d)
    assert d == before
