"""Qwen3-Omni-30B-A3B-Instruct's speech path at its real widths: the one place for its values.

The values are those of the published config.json (speech path only: the thinker's
text model, the talker with its code predictor, Code2Wav; the audio and vision towers
are never loaded by this engine). Two users, one source:

- `load_pipeline("random:qwen3-omni-30b-a3b")` (loading/random_weights.py): the full depth with
  random weights, for GPU benchmarks; `?layers=N` cuts the thinker and the talker to N
  layers (CPU tests).
- the real-width test checkpoint (`ensure_real_width`): the HF reference classes, 1
  thinker and 1 talker layer, written with `save_pretrained` in bfloat16 as the real
  checkpoint is, so it goes through the same loader as the real one.

Both need a tokenizer whose special ids are Qwen's real ones (151644 = <|im_start|>, ...):
`build_tokenizer` is the tiny byte-level tokenizer with its named tokens placed at
those ids. It does not split text as Qwen's BPE does; the model never sees a
difference, since the weights are random and every id it is fed lies in the real
vocabulary.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

from omni_core.cache import cache_dir
from omni_core.synthetic import tiny

NAME = "qwen3-omni-30b-a3b"

# Qwen's vocabulary ids of the tokens the speech path names (published tokenizer and config).
TOKEN_IDS = {
    "<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
    "<|audio_start|>": 151669, "<|audio_end|>": 151670, "<|AUDIO|>": 151675,
    "<|IMAGE|>": 151655, "<|VIDEO|>": 151656, "<|vision_start|>": 151652, "<|vision_end|>": 151653,
    "<tts_pad>": 151671, "<tts_text_bos>": 151672, "<tts_text_eod>": 151673,
    "system": 8948, "user": 872, "assistant": 77091,
}
assert set(TOKEN_IDS) == set(tiny.SPECIAL_TOKENS + tiny.ROLE_TOKENS)

_MROPE = {"rope_type": "default", "rope_theta": 1_000_000, "mrope_section": [24, 20, 20], "interleaved": True}
_MODALITY_IDS = dict(audio_token_id=TOKEN_IDS["<|AUDIO|>"], image_token_id=TOKEN_IDS["<|IMAGE|>"],
                     video_token_id=TOKEN_IDS["<|VIDEO|>"], audio_start_token_id=TOKEN_IDS["<|audio_start|>"],
                     vision_start_token_id=TOKEN_IDS["<|vision_start|>"])

# config.json, speech path (the towers' sub-configs left out), as published.
CONFIG = {
    "model_type": "qwen3_omni_moe",
    "dtype": "bfloat16",
    "thinker_config": {
        "text_config": {
            "vocab_size": 152064, "hidden_size": 2048, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 768, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
            "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "shared_expert_intermediate_size": 0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
            "rope_parameters": {**_MROPE, "mrope_interleaved": True},
        },
        "user_token_id": TOKEN_IDS["user"], "audio_end_token_id": TOKEN_IDS["<|audio_end|>"],
        "vision_end_token_id": TOKEN_IDS["<|vision_end|>"], "tie_word_embeddings": False, **_MODALITY_IDS,
    },
    "talker_config": {
        "text_config": {
            "vocab_size": 3072, "hidden_size": 1024, "num_hidden_layers": 20,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128,
            "intermediate_size": 2048, "moe_intermediate_size": 384, "num_local_experts": 128,
            "num_experts_per_tok": 6, "norm_topk_prob": True, "shared_expert_intermediate_size": 768,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "rms_norm_eps": 1e-6, "rope_parameters": dict(_MROPE),
        },
        "code_predictor_config": {
            "vocab_size": 2048, "hidden_size": 1024, "num_hidden_layers": 5,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
            "num_code_groups": 16, "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000},
        },
        "num_code_groups": 16, "thinker_hidden_size": 2048, "accept_hidden_layer": 24,
        "spatial_merge_size": 2, "speaker_id": dict(tiny.SPEAKERS),
        "audio_end_token_id": TOKEN_IDS["<|audio_end|>"], **tiny.CODEC_IDS, **_MODALITY_IDS,
    },
    "code2wav_config": {
        "codebook_size": 2048, "num_quantizers": 16, "hidden_size": 1024, "num_hidden_layers": 8,
        "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 3072,
        "sliding_window": 72, "decoder_dim": 1536, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2],
        "rms_norm_eps": 1e-5, "layer_scale_initial_scale": 0.01,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000},
    },
    "im_start_token_id": TOKEN_IDS["<|im_start|>"], "im_end_token_id": TOKEN_IDS["<|im_end|>"],
    "tts_pad_token_id": TOKEN_IDS["<tts_pad>"], "tts_bos_token_id": TOKEN_IDS["<tts_text_bos>"],
    "tts_eos_token_id": TOKEN_IDS["<tts_text_eod>"], "system_token_id": TOKEN_IDS["system"],
    "user_token_id": TOKEN_IDS["user"], "assistant_token_id": TOKEN_IDS["assistant"],
}


def config_dict(layers: int | None = None) -> dict:
    """The speech path's config.json; `layers` cuts the thinker and the talker to that many
    layers (the predictor and Code2Wav keep theirs), with `accept_hidden_layer` kept in range."""
    d = copy.deepcopy(CONFIG)
    if layers is not None:
        if int(layers) < 1:
            raise ValueError(f"layers must be at least 1, got {layers}")
        d["thinker_config"]["text_config"]["num_hidden_layers"] = int(layers)
        d["talker_config"]["text_config"]["num_hidden_layers"] = int(layers)
        tk = d["talker_config"]
        tk["accept_hidden_layer"] = min(tk["accept_hidden_layer"], int(layers))
    return d


def omni_config(layers: int | None = None):
    from omni_core.models.config import OmniConfig
    return OmniConfig.from_hf(config_dict(layers))


# Qwen2's pre-tokenizer pattern (its tokenizer.json): words, single digits, punctuation runs, spaces. With no
# merges it changes no id (every byte is its own token), but it cuts the text where Qwen's does, so text that
# arrives in pieces (models/qwen3_tts/live_text.py) settles word by word here as with the real tokenizer.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")


def build_tokenizer():
    """The tiny byte-level tokenizer (bytes are ids 0..255) with its named tokens at Qwen's ids, cut into words as
    Qwen's is (QWEN_SPLIT)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=tiny.byte_of)
    vocab = {ch: i for i, ch in enumerate(alphabet)} | TOKEN_IDS  # added tokens found here keep these ids
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, chat_template=tiny.CHAT_TEMPLATE)
    tok.add_special_tokens({"additional_special_tokens": tiny.SPECIAL_TOKENS})
    tok.add_tokens(tiny.ROLE_TOKENS)
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    for text, want in TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(text) == want, (text, tok.convert_tokens_to_ids(text), want)
    return tok


# ---- the real-width test checkpoint (HF classes) ----------------------------------------------

# The towers are not on the speech path but are part of HF's model: kept tiny, as in tiny.py.
_TINY_TOWERS = dict(
    audio_config=dict(num_mel_bins=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                      d_model=16, output_dim=2048, downsample_hidden_size=8),
    vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=2048,
                       num_position_embeddings=16, deepstack_visual_indexes=[0]),
)


def hf_config(layers: int = 1):
    """`Qwen3OmniMoeConfig` of the speech path at real widths, `layers` thinker and talker layers."""
    from transformers import Qwen3OmniMoeConfig

    d = config_dict(layers)
    d["thinker_config"].update(copy.deepcopy(_TINY_TOWERS))
    return Qwen3OmniMoeConfig(**{k: v for k, v in d.items() if k != "model_type"})


def build_hf_model(layers: int = 1):
    """HF's model of `hf_config(layers)` with tiny.py's seeded weight spread (float32, eval)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(tiny.SEED)
    with matrices_left_undrawn():
        model = Qwen3OmniMoeForConditionalGeneration(hf_config(layers)).eval()
    tiny.spread_weights(model)
    return model


# torch's and HF's initialisers that draw random numbers (their names in torch.nn.init)
_DRAWS = ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
          "kaiming_normal_", "orthogonal_", "sparse_")


@contextlib.contextmanager
def matrices_left_undrawn():
    """While it lasts, torch's and HF's random initialisers leave a tensor of 2 or more dimensions as it is
    (uninitialised memory at construction): `spread_weights` draws every such parameter again, from generators
    of its own, so HF's draws of them (3.5 billion floats at the real widths, most of a build's time) were
    never read. Everything of 1 dimension (norms, biases) is initialised as HF initialises it, and the
    checkpoint is the same, bit for bit (tests/test_presets.py)."""
    import torch.nn.init
    from transformers import initialization

    def skipping(draw):
        return lambda tensor, *args, **kwargs: tensor if tensor.dim() >= 2 else draw(tensor, *args, **kwargs)

    # HF's initialisers call torch's through TORCH_INIT_FUNCTIONS; module constructors call torch.nn.init's.
    tables = [(vars(torch.nn.init), name) for name in _DRAWS]
    tables += [(initialization.TORCH_INIT_FUNCTIONS, name) for name in _DRAWS
               if name in initialization.TORCH_INIT_FUNCTIONS]
    originals = [(table, name, table[name]) for table, name in tables]
    try:
        for table, name, draw in originals:
            table[name] = skipping(draw)
        yield
    finally:
        for table, name, draw in originals:
            table[name] = draw


def ensure_real_width(layers: int = 1, root: Path | None = None, max_shard_size: str = "1GB") -> Path:
    """Path of the cached real-width checkpoint (bfloat16, as published), written on first use.

    About 3.5 GB on disk for 1 layer each; building it holds the float32 model (~7 GB)."""
    import torch

    def write(folder: Path) -> None:
        model = build_hf_model(layers).to(torch.bfloat16)
        model.save_pretrained(folder, max_shard_size=max_shard_size)
        del model
        build_tokenizer().save_pretrained(folder)

    return tiny.write_once((root or cache_dir()) / f"{NAME}-{layers}layer-v1", write)
