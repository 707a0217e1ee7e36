"""The embedded tiny model: exactly the Qwen3-Omni architecture, random weights.

It is built with the Hugging Face classes from a fixed seed and written with
`save_pretrained`, so it is loaded through the same code as a real checkpoint.
Two presets of different shapes exist so that tests catch shape assumptions.
"""

from __future__ import annotations

from pathlib import Path

from omni_core.cache import cache_dir
from omni_core.loading.quiet import quiet_transformers

# Byte-level vocabulary: ids 0..255 are bytes; then Qwen's special tokens, then the
# role words, which Qwen's vocabulary also holds as single ids.
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|audio_start|>", "<|audio_end|>", "<|AUDIO|>", "<|IMAGE|>", "<|VIDEO|>",
    "<|vision_start|>", "<|vision_end|>",
    "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
]
ROLE_TOKENS = ["system", "user", "assistant"]
TOKEN_IDS = {tok: 256 + i for i, tok in enumerate(SPECIAL_TOKENS + ROLE_TOKENS)}
TEXT_VOCAB = 320  # 256 bytes + 16 named tokens, padded

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Real Qwen3-Omni codec special ids; they sit in the suppressed band [vocab-1024, vocab).
CODEC_IDS = dict(
    codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150,
    codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
)
SPEAKERS = {"chelsie": 2301, "ethan": 2302, "aiden": 2303}

PRESETS = {
    # The default: MoE everywhere, 8 experts top-2.
    "tiny": dict(
        thinker=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                     num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[], mrope_section=[4, 2, 2]),
        talker=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=16, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                    num_experts_per_tok=2, shared_expert_intermediate_size=64, mrope_section=[4, 2, 2]),
        predictor=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=128),
        code2wav=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=128, sliding_window=72, decoder_dim=64),
    ),
    # A second shape: dense first thinker layer, top-1 routing, other head sizes,
    # a short codec attention window (so chunked decoding crosses it).
    "tiny-b": dict(
        thinker=dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=3,
                     head_dim=8, intermediate_size=96, moe_intermediate_size=24, num_experts=4,
                     num_experts_per_tok=1, norm_topk_prob=False, mlp_only_layers=[0], mrope_section=[2, 1, 1]),
        talker=dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                    head_dim=8, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
                    num_experts_per_tok=2, shared_expert_intermediate_size=48, mrope_section=[2, 1, 1]),
        predictor=dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                       head_dim=8, intermediate_size=64),
        code2wav=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      intermediate_size=64, sliding_window=6, decoder_dim=32),
    ),
}
SEED = 20251129


def hf_config(preset: str = "tiny"):
    """The `Qwen3OmniMoeConfig` of a preset (HF classes; imported lazily)."""
    from transformers import Qwen3OmniMoeConfig

    p = PRESETS[preset]
    th, tk, cp, cw = p["thinker"], p["talker"], p["predictor"], p["code2wav"]
    rope = lambda s: {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": s,  # noqa: E731
                      "interleaved": True, "mrope_interleaved": True}
    text_config = {k: v for k, v in th.items() if k != "mrope_section"}
    text_config.update(vocab_size=TEXT_VOCAB, rope_parameters=rope(th["mrope_section"]))
    talker_text = {k: v for k, v in tk.items() if k != "mrope_section"}
    talker_text.update(vocab_size=3072, rope_parameters=rope(tk["mrope_section"]))
    return Qwen3OmniMoeConfig(
        thinker_config=dict(
            text_config=text_config,
            # The towers are unused by the speech path but part of the architecture: keep them tiny.
            audio_config=dict(num_mel_bins=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                              d_model=16, output_dim=th["hidden_size"], downsample_hidden_size=8),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                               out_hidden_size=th["hidden_size"], num_position_embeddings=16,
                               deepstack_visual_indexes=[0]),
            user_token_id=TOKEN_IDS["user"], audio_token_id=TOKEN_IDS["<|AUDIO|>"],
            image_token_id=TOKEN_IDS["<|IMAGE|>"], video_token_id=TOKEN_IDS["<|VIDEO|>"],
            audio_start_token_id=TOKEN_IDS["<|audio_start|>"], vision_start_token_id=TOKEN_IDS["<|vision_start|>"],
        ),
        talker_config=dict(
            text_config=talker_text,
            code_predictor_config=dict(vocab_size=2048, num_code_groups=16,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, **cp),
            num_code_groups=16, thinker_hidden_size=th["hidden_size"], accept_hidden_layer=1,
            speaker_id=dict(SPEAKERS), spatial_merge_size=2,
            audio_token_id=TOKEN_IDS["<|AUDIO|>"], image_token_id=TOKEN_IDS["<|IMAGE|>"],
            video_token_id=TOKEN_IDS["<|VIDEO|>"], vision_start_token_id=TOKEN_IDS["<|vision_start|>"],
            audio_start_token_id=TOKEN_IDS["<|audio_start|>"], **CODEC_IDS,
        ),
        code2wav_config=dict(codebook_size=2048, num_quantizers=16, upsample_rates=[8, 5, 4, 3],
                             upsampling_ratios=[2, 2], **cw),
        im_start_token_id=TOKEN_IDS["<|im_start|>"], im_end_token_id=TOKEN_IDS["<|im_end|>"],
        tts_pad_token_id=TOKEN_IDS["<tts_pad>"], tts_bos_token_id=TOKEN_IDS["<tts_text_bos>"],
        tts_eos_token_id=TOKEN_IDS["<tts_text_eod>"], system_token_id=TOKEN_IDS["system"],
        user_token_id=TOKEN_IDS["user"], assistant_token_id=TOKEN_IDS["assistant"],
    )


def build_tokenizer():
    """A byte-level tokenizer with Qwen's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_vocab = {ch: i for i, ch in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    byte_vocab = {ch: i for i, ch in enumerate(sorted(byte_vocab, key=byte_of))}
    core = Tokenizer(models.BPE(vocab=byte_vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, chat_template=CHAT_TEMPLATE)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    tok.add_tokens(ROLE_TOKENS)
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    for text, want in TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(text) == want, (text, tok.convert_tokens_to_ids(text), want)
    return tok


def byte_of(ch: str) -> int:
    """The byte a ByteLevel alphabet character stands for (GPT-2's bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    code = ord(ch)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def build_hf_model(preset: str = "tiny", seed: int = SEED):
    """The HF reference model of a preset with deterministic random weights (float32, eval)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(hf_config(preset)).eval()
    spread_weights(model)
    return model


def spread_weights(model) -> None:
    """Give the random weights enough spread that codes vary across frames.

    HF initialises with std 0.02, which makes every logit nearly equal: greedy
    decoding then repeats one code, and the codec's audio peaks near 1e-6. A larger,
    seeded spread keeps the model a structurally honest test (routing, attention
    and codes all vary; the audio is audible and mostly unclamped).
    """
    import torch

    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "code2wav" not in name:
                draw(p, gen, (1.0 / p.shape[-1]) ** 0.5)
    spread_codec(model.code2wav)


def draw(p, gen, std: float = 1.0, mean: float | None = None) -> None:
    """p ← N(mean, std²) from `gen`, in place: the floats of `p.copy_(torch.randn(p.shape, generator=gen) * std
    [+ mean])` (randn is normal_ on a new tensor, and the scale and shift round as they did) without a second
    copy of p (building a real-width checkpoint spent as long copying as drawing). Another dtype than float32
    is drawn in float32 and rounded, as the copy rounded it."""
    import torch

    if p.dtype != torch.float32:
        x = torch.randn(p.shape, generator=gen) * std
        p.copy_(x if mean is None else x + mean)
        return
    p.normal_(generator=gen).mul_(std)
    if mean is not None:
        p.add_(mean)


def spread_codec(code2wav, seed: int = SEED + 2, skip: frozenset[str] = frozenset()) -> None:
    """Unit-gain random weights; residual branches and the output conv scaled down and the output
    conv made DC-free, so activations stay O(1) through the decoder and the audio mostly unclamped.
    Parameters named in `skip` are left as they are (the caller fills them)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    final = f"decoder.{len(code2wav.decoder) - 1}."
    with torch.no_grad():
        for name, p in code2wav.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name in skip:
                continue
            if name == "code_embedding.weight":
                draw(p, gen, 1.0, 0.0)
            elif p.dim() >= 2:
                fan_in = 2 * p.shape[0] if isinstance(_owner(code2wav, name), torch.nn.ConvTranspose1d) \
                    else p[0].numel()
                gain = 0.1 if name.startswith(final) else 0.3 if ".conv2." in name else 1.0
                draw(p, gen, gain * fan_in ** -0.5, 0.0)
            elif leaf in ("alpha", "beta"):
                draw(p, gen, 0.3, 0.0)
            elif leaf in ("scale", "gamma"):
                draw(p, gen, 0.2, 0.0)
            elif leaf == "weight":  # norms
                draw(p, gen, 0.1, 1.0)
            else:  # biases
                draw(p, gen, 0.1, 0.0)
        out = code2wav.decoder[-1].conv
        out.weight.sub_(out.weight.mean(dim=(1, 2), keepdim=True))
        out.bias.zero_()


def _owner(model, param_name: str):
    return model.get_submodule(param_name.rsplit(".", 1)[0])


def ensure_tiny(preset: str = "tiny", root: Path | None = None) -> Path:
    """Path of the cached tiny checkpoint, written on first use (atomically)."""

    def write(folder: Path) -> None:
        build_hf_model(preset).save_pretrained(folder, max_shard_size="2MB")
        build_tokenizer().save_pretrained(folder)

    return write_once((root or cache_dir()) / f"{preset}-v2", write)


def write_once(target: Path, write) -> Path:
    """`target`, made by write(folder) into a temporary folder beside it and renamed into place,
    so that a reader never sees half a checkpoint; kept when it already exists."""
    import shutil
    import tempfile

    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with quiet_transformers():
            write(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process won the race; theirs is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
