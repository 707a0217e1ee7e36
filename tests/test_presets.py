"""The published Qwen3-Omni widths (omni_core/synthetic/presets.py): the config, cut to N layers,
and a tokenizer with the tiny one's bytes and Qwen's ids for the named tokens."""

from __future__ import annotations

import contextlib

import pytest

from omni_core.synthetic import presets


def test_config_dict_cuts_only_the_thinker_and_talker_and_keeps_accept_layer_in_range():
    full, cut = presets.config_dict(), presets.config_dict(layers=2)
    assert full["thinker_config"]["text_config"]["num_hidden_layers"] == 48
    assert cut["thinker_config"]["text_config"]["num_hidden_layers"] == 2
    assert cut["talker_config"]["text_config"]["num_hidden_layers"] == 2
    assert cut["talker_config"]["accept_hidden_layer"] == 2 and full["talker_config"]["accept_hidden_layer"] == 24
    assert cut["talker_config"]["code_predictor_config"] == full["talker_config"]["code_predictor_config"]
    assert cut["code2wav_config"] == full["code2wav_config"]
    assert presets.CONFIG["thinker_config"]["text_config"]["num_hidden_layers"] == 48  # a copy was cut
    with pytest.raises(ValueError, match="layers must be at least 1"):
        presets.config_dict(layers=0)


def test_omni_config_is_the_parsed_dict():
    cfg = presets.omni_config(layers=3)
    assert (cfg.thinker.num_hidden_layers, cfg.talker.num_hidden_layers, cfg.predictor.num_hidden_layers) == (3, 3, 5)
    assert cfg.token_ids["im_start"] == 151644 and cfg.thinker.vocab_size == 152064


def test_tokenizer_has_qwens_ids_and_the_byte_ids():
    tok = presets.build_tokenizer()
    for text, want in presets.TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(text) == want
    assert tok("ab", add_special_tokens=False)["input_ids"] == [97, 98]
    ids = tok.apply_chat_template([{"role": "user", "content": "a"}], add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert ids[:2] == [151644, 872] and ids[-2:] == [77091, 10]


def test_a_build_without_hfs_matrix_draws_gives_the_same_weights_bit_for_bit():
    """`matrices_left_undrawn` skips HF's random init of the >= 2-D tensors, which `spread_weights` draws again:
    the same classes at the tiny widths give the same parameters and buffers either way, and the build does
    skip (a matrix left undrawn holds what torch.empty held, not HF's std-0.02 draw)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from omni_core.synthetic import tiny

    def build(skip: bool):
        torch.manual_seed(tiny.SEED)
        with presets.matrices_left_undrawn() if skip else contextlib.nullcontext():
            model = Qwen3OmniMoeForConditionalGeneration(tiny.hf_config("tiny")).eval()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        tiny.spread_weights(model)
        return before, model.state_dict()

    drawn, want = build(skip=False)
    undrawn, got = build(skip=True)
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    matrices = [k for k, v in drawn.items() if v.dim() >= 2 and v.is_floating_point()]
    assert sum(not torch.equal(drawn[k], undrawn[k]) for k in matrices) >= len(matrices) // 2
    vectors = [k for k, v in drawn.items() if v.dim() < 2]
    assert all(torch.equal(drawn[k], undrawn[k]) for k in vectors)  # 1-D: HF's own init, as before
