"""The embedded tiny checkpoints (omni_core/synthetic/tiny.py): a byte-level tokenizer with Qwen's
special tokens at fixed ids, two differently shaped presets, written once (atomically), deterministic."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from omni_core.synthetic import tiny
from omni_core.synthetic.tiny import ensure_tiny


def test_tokenizer_bytes_are_ids_and_named_tokens_have_their_ids():
    tok = tiny.build_tokenizer()
    assert tok("Hé!", add_special_tokens=False)["input_ids"] == list("Hé!".encode())
    assert tok.convert_tokens_to_ids("<|im_end|>") == tiny.TOKEN_IDS["<|im_end|>"] == 258
    assert max(tiny.TOKEN_IDS.values()) < tiny.TEXT_VOCAB
    ids = tok.apply_chat_template([{"role": "user", "content": "a"}], add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert tok.decode(ids) == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n"


def test_byte_of_inverts_the_byte_level_alphabet():
    from tokenizers import pre_tokenizers

    assert sorted(tiny.byte_of(ch) for ch in pre_tokenizers.ByteLevel.alphabet()) == list(range(256))
    assert tiny.byte_of("A") == 65 and tiny.byte_of("Ġ") == 32  # GPT-2 writes a space as Ġ


def test_the_presets_differ_in_shape():
    a, b = tiny.hf_config("tiny"), tiny.hf_config("tiny-b")
    assert a.thinker_config.text_config.hidden_size == 64 and b.thinker_config.text_config.hidden_size == 48
    assert a.code2wav_config.sliding_window == 72 and b.code2wav_config.sliding_window == 6
    assert a.talker_config.speaker_id == tiny.SPEAKERS and a.talker_config.codec_eos_token_id == 2150


def test_write_once_keeps_what_is_there_and_leaves_no_temporary_folder(tmp_path):
    calls = []

    def write(folder):
        calls.append(folder)
        (folder / "config.json").write_text("{}")

    target = tmp_path / "ckpt"
    assert tiny.write_once(target, write) == target and (target / "config.json").is_file()
    assert tiny.write_once(target, write) == target and len(calls) == 1  # kept
    assert calls[0] != target and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_tiny_is_cached_and_deterministic(tmp_path):
    a, b = ensure_tiny("tiny", tmp_path / "a"), ensure_tiny("tiny", tmp_path / "b")
    assert ensure_tiny("tiny", tmp_path / "a") == a
    for shard in sorted(a.glob("*.safetensors")):
        left, right = load_file(shard), load_file(b / shard.name)
        assert all(torch.equal(left[k], right[k]) for k in left)
