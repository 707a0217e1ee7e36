"""Qwen3-TTS checkpoints made locally: `tiny-tts` and `tiny-tts-base` on disk, and the real sizes
for 'random:' sources.

- `tiny-tts`: a CustomVoice model (three speakers, one of them a dialect speaker; five
  languages; a 0.6B-style model, so no instruction) with its codec and the codec's encoder,
  written in the hub layout (config.json, generation_config.json, model.safetensors, the
  tokenizer, speech_tokenizer/) with seeded random weights, once, into the synthetic cache. It
  is built with omni_core's own modules (the official classes live in their own environment:
  tests/reference/qwen_tts_oracle.py) and loaded through the same code as a real checkpoint.
- `tiny-tts-base`: the same talker, codec and weights as a Base model (voice cloning: no named
  speakers, no instruction) with its ECAPA speaker encoder (`speaker_encoder.*` in
  model.safetensors, `speaker_encoder_config` in config.json, its x-vector as wide as the
  talker), drawn from a seed of its own; cached and loaded like `tiny-tts`.
- `random:qwen3-tts-0.6b`, `random:qwen3-tts-1.7b`: the real widths (the package's config
  classes and the issue's reading of the released configs: 28 dense layers, 16/8 heads, head
  dim 128; 0.6B hidden 1024 / FFN 3072, 1.7B hidden 2048 / FFN 6144 with a 1024-wide predictor;
  the codec's decoder 8 × 512, latent 1024, codebook_dim 512) with random weights drawn on the
  device (loading/random_weights.py). The released files could not be read here (no hub
  access): these widths are the best reading, not a copy. `ensure_random_tts` writes one to disk
  in the hub layout (bfloat16, as released) with the weights the 'random:' source draws, so that
  the official package can run on the same weights (benchmarks/tts.py).

The tokenizer is presets.build_tokenizer (bytes, and Qwen's special ids): the model never sees
a difference, its weights being random and every id in the real vocabulary.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from omni_core.cache import cache_dir
from omni_core.synthetic import presets, tiny
from omni_core.synthetic.weights import fill_random, mimi_encoder, spread, spread_codec

TINY = "tiny-tts"
TINY_BASE = "tiny-tts-base"
TINY_PRESETS = (TINY, TINY_BASE)  # on disk, with the tiny codec and its encoder
RANDOM = ("qwen3-tts-0.6b", "qwen3-tts-1.7b")
SEED = 20260116
TEXT_VOCAB = 151936

_CODEC_IDS = dict(codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
                  codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157)
_LANGUAGES = {"chinese": 2055, "english": 2050, "german": 2053, "japanese": 2058, "korean": 2064,
              "french": 2061, "russian": 2069, "portuguese": 2071, "spanish": 2054, "italian": 2070,
              "beijing_dialect": 2074, "sichuan_dialect": 2062}
_SPEAKERS = {"vivian": 3065, "serena": 3066, "uncle_fu": 3010, "dylan": 2878, "eric": 2875, "ryan": 3061,
             "aiden": 2861, "ono_anna": 2873, "sohee": 2864}
_DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}
_TOKENS = {k: presets.TOKEN_IDS[v] for k, v in (("im_start", "<|im_start|>"), ("im_end", "<|im_end|>"),
                                                   ("tts_pad", "<tts_pad>"), ("tts_bos", "<tts_text_bos>"),
                                                   ("tts_eos", "<tts_text_eod>"))}
_GENERATION = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                   subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
                   max_new_tokens=8192)


def _talker(hidden: int, ffn: int, layers: int, heads: int, kv: int, head_dim: int, text_hidden: int,
            predictor: dict, speakers: dict) -> dict:
    half = head_dim // 2
    section = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]  # 128 → [24, 20, 20]
    return dict(
        vocab_size=3072, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, hidden_act="silu",
        rms_norm_eps=1e-6, rope_theta=1_000_000.0, max_position_embeddings=32768,
        rope_scaling={"rope_type": "default", "mrope_section": section, "interleaved": True},
        num_code_groups=16, text_vocab_size=TEXT_VOCAB, text_hidden_size=text_hidden,
        spk_id=dict(speakers), spk_is_dialect={s: _DIALECTS.get(s, False) for s in speakers},
        codec_language_id=dict(_LANGUAGES), code_predictor_config=dict(
            vocab_size=2048, num_code_groups=16, rms_norm_eps=1e-6, rope_theta=1_000_000.0, **predictor),
        **_CODEC_IDS)


def _predictor(hidden, ffn, layers, heads, kv, head_dim) -> dict:
    return dict(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, head_dim=head_dim)


def _tiny_talker(speakers: dict) -> dict:
    return _talker(64, 128, 2, 4, 2, 16, 32, _predictor(64, 96, 2, 4, 2, 16), speakers)


REAL_PREDICTOR = _predictor(1024, 3072, 5, 16, 8, 128)
# The package's Qwen3TTSSpeakerEncoderConfig fields; mel_dim is fixed by the log-mel (128 bins),
# enc_dim is the talker's width (the x-vector fills the speaker slot).
TINY_SPEAKER_ENCODER = dict(mel_dim=128, enc_dim=64, enc_channels=[32, 32, 32, 32, 96],
                            enc_kernel_sizes=[5, 3, 3, 3, 1], enc_dilations=[1, 2, 3, 4, 1],
                            enc_attention_channels=16, enc_res2net_scale=4, enc_se_channels=16, sample_rate=24000)
CONFIGS = {
    TINY: dict(model_type="qwen3_tts", tts_model_type="custom_voice", tts_model_size="0b6",
               tokenizer_type="qwen3_tts_tokenizer_12hz",
               talker_config=_tiny_talker({s: _SPEAKERS[s] for s in ("vivian", "ryan", "dylan")})),
    TINY_BASE: dict(model_type="qwen3_tts", tts_model_type="base", tts_model_size="0b6",
                    tokenizer_type="qwen3_tts_tokenizer_12hz", talker_config=_tiny_talker({}),
                    speaker_encoder_config=TINY_SPEAKER_ENCODER),
    "qwen3-tts-0.6b": dict(model_type="qwen3_tts", tts_model_type="custom_voice", tts_model_size="0b6",
                           tokenizer_type="qwen3_tts_tokenizer_12hz",
                           talker_config=_talker(1024, 3072, 28, 16, 8, 128, 2048, REAL_PREDICTOR, _SPEAKERS)),
    "qwen3-tts-1.7b": dict(model_type="qwen3_tts", tts_model_type="custom_voice", tts_model_size="1b7",
                           tokenizer_type="qwen3_tts_tokenizer_12hz",
                           talker_config=_talker(2048, 6144, 28, 16, 8, 128, 2048, REAL_PREDICTOR, _SPEAKERS)),
}
for _c in CONFIGS.values():
    _c.update({f"{k}_token_id": v for k, v in _TOKENS.items()}, dtype="bfloat16")
for _name in TINY_PRESETS:
    CONFIGS[_name]["dtype"] = "float32"

_MIMI = dict(sampling_rate=24000, frame_rate=12.5, audio_channels=1, num_quantizers=32, codebook_size=2048,
             num_semantic_quantizers=1, upsampling_ratios=[8, 6, 5, 4], use_causal_conv=True, compress=2)
CODECS = {
    TINY: dict(decoder=dict(codebook_dim=16, latent_dim=32, hidden_size=32, num_attention_heads=4,
                            num_key_value_heads=4, head_dim=8, intermediate_size=64, num_hidden_layers=2,
                            decoder_dim=32, sliding_window=8),
               encoder=dict(_MIMI, hidden_size=16, num_filters=4, codebook_dim=8,
                            vector_quantization_hidden_dimension=8, upsample_groups=16, num_hidden_layers=2,
                            intermediate_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=8)),
    "real": dict(decoder=dict(codebook_dim=512, latent_dim=1024, hidden_size=512, num_attention_heads=16,
                              num_key_value_heads=16, head_dim=64, intermediate_size=1024, num_hidden_layers=8,
                              decoder_dim=1536, sliding_window=72),
                 encoder=dict(_MIMI, hidden_size=512, num_filters=64, codebook_dim=256,
                              vector_quantization_hidden_dimension=256, upsample_groups=512, num_hidden_layers=8,
                              intermediate_size=2048, num_attention_heads=8, num_key_value_heads=8, head_dim=64)),
}


def config_dict(name: str) -> dict:
    return copy.deepcopy(CONFIGS[name])


def codec_dict(name: str) -> dict:
    spec = CODECS[TINY if name in TINY_PRESETS else "real"]
    decoder = dict(codebook_size=2048, num_quantizers=16, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
                   rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=8000, **spec["decoder"])
    return dict(model_type="qwen3_tts_tokenizer_12hz", encoder_config=copy.deepcopy(spec["encoder"]),
                decoder_config=decoder, encoder_valid_num_quantizers=16, input_sample_rate=24000,
                output_sample_rate=24000, decode_upsample_rate=1920, encode_downsample_rate=1920)


def tts_config(name: str, layers: int | None = None):
    """The TTSConfig of a preset; `layers` cuts the talker (the predictor and the codec keep theirs)."""
    from omni_core.models.qwen3_tts.config import TTSConfig

    d = config_dict(name)
    if layers is not None:
        d["talker_config"]["num_hidden_layers"] = int(layers)
    codec = codec_dict(name)
    if name not in TINY_PRESETS:
        codec["encoder_config"] = None  # a random encoder would encode nothing meaningful: not built
    return TTSConfig.from_hf(d, codec, _GENERATION)


# ---- tiny-tts and tiny-tts-base on disk --------------------------------------------------------

def ensure_tiny_tts(name: str = TINY, root: Path | None = None) -> Path:
    """Path of the cached checkpoint of a tiny preset (TINY_PRESETS), written on first use (atomically)."""
    if name not in TINY_PRESETS:
        raise ValueError(f"unknown tiny Qwen3-TTS preset {name!r}: choose one of {', '.join(TINY_PRESETS)}")
    return tiny.write_once((root or cache_dir()) / f"{name}-v2", lambda folder: write_tiny_tts(folder, name))


def write_tiny_tts(folder: Path, preset: str = TINY) -> None:
    """The preset in the hub layout. Talker and codec come from SEED in one order, so both presets
    share them; a Base model's speaker encoder is drawn from its own seed after."""
    from omni_core.codec.qwen3_tts import TTSCodec
    from omni_core.loading.checkpoint import checkpoint_names
    from omni_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder
    from omni_core.models.qwen3_tts.talker import Talker

    cfg = tts_config(preset)
    gen = torch.Generator().manual_seed(SEED)
    talker, codec = Talker(cfg), TTSCodec(cfg.codec)
    spread(talker, gen)
    spread_codec(codec.decoder, gen)
    encoder = mimi_encoder(cfg.codec, gen)
    weights = _named(checkpoint_names(talker), "talker.")
    if cfg.speaker_encoder is not None:
        speaker_encoder = SpeakerEncoder(cfg.speaker_encoder)
        spread(speaker_encoder, torch.Generator().manual_seed(SEED + 1))
        weights.update(_named(checkpoint_names(speaker_encoder), "speaker_encoder."))
    _write_layout(folder, config_dict(preset), codec_dict(preset), weights, codec.decoder, encoder)


# ---- the real sizes on disk ---------------------------------------------------------------------

def ensure_random_tts(name: str, layers: int | None = None, root: Path | None = None) -> Path:
    """Path of the cached checkpoint of a real-size preset (RANDOM), talker cut to `layers` if given,
    written on first use (atomically). About 2 GB on disk for 0.6B, 4 GB for 1.7B."""
    if name not in RANDOM:
        raise ValueError(f"unknown real-size Qwen3-TTS preset {name!r}: choose one of {', '.join(RANDOM)}")
    tag = name if layers is None else f"{name}-layers{int(layers)}"
    target = (root or cache_dir()) / f"{tag}-v1"
    return tiny.write_once(target, lambda folder: write_random_tts(folder, name, layers))


@torch.no_grad()
def write_random_tts(folder: Path, name: str, layers: int | None = None) -> None:
    """A real-size preset in the hub layout, bfloat16 on disk: the talker and codec decoder hold the
    weights `load_pipeline(f"random:{name}?layers={layers}", device="cpu", dtype="bfloat16")` draws
    (synthetic/weights.fill_random, default seed); the codec's encoder, which that source
    does not build, is seeded here (mimi_encoder) so that the folder is a complete checkpoint."""
    from omni_core.codec.qwen3_tts import TTSCodec
    from omni_core.loading.checkpoint import checkpoint_names, materialize
    from omni_core.models.qwen3_tts.config import TTSConfig
    from omni_core.models.qwen3_tts.talker import Talker

    config, codec_config = config_dict(name), codec_dict(name)
    if layers is not None:
        config["talker_config"]["num_hidden_layers"] = int(layers)
    cfg = TTSConfig.from_hf(config, codec_config, _GENERATION)
    with torch.device("meta"):
        modules = {"talker": Talker(cfg), "code2wav": TTSCodec(cfg.codec)}  # as loading/qwen3_tts builds them
    for m in modules.values():
        materialize(m, torch.device("cpu"), torch.bfloat16)
    fill_random(modules)
    encoder = mimi_encoder(cfg.codec, torch.Generator().manual_seed(SEED + 200)).to(torch.bfloat16)
    weights = _named(checkpoint_names(modules["talker"]), "talker.")
    _write_layout(folder, config, codec_config, weights, modules["code2wav"].decoder, encoder)


def _write_layout(folder: Path, config: dict, codec_config: dict, weights: dict[str, torch.Tensor],
                  decoder: torch.nn.Module, encoder: torch.nn.Module) -> None:
    """The hub layout: config.json, generation_config.json, model.safetensors (`weights`), the
    tokenizer, speech_tokenizer/ (the codec's decoder and encoder under the package's names)."""
    from safetensors.torch import save_file

    from omni_core.codec.qwen3_tts import ENCODER_RENAMES
    from omni_core.loading.checkpoint import checkpoint_names

    (folder / "speech_tokenizer").mkdir(parents=True)
    save_file(weights, str(folder / "model.safetensors"))
    codec_state = _named(checkpoint_names(decoder), "decoder.")
    for name, tensor in encoder.state_dict().items():
        for old, new in ENCODER_RENAMES:  # back to the names the package writes
            if name.startswith(new):
                name = old + name[len(new):]
                break
        codec_state["encoder." + name] = tensor.contiguous()
    save_file(codec_state, str(folder / "speech_tokenizer" / "model.safetensors"))
    _json(folder / "config.json", config)
    _json(folder / "generation_config.json", _GENERATION)
    _json(folder / "speech_tokenizer" / "config.json", codec_config)
    _json(folder / "speech_tokenizer" / "preprocessor_config.json",
          dict(feature_extractor_type="EncodecFeatureExtractor", feature_size=1, sampling_rate=24000,
               padding_value=0.0, padding_side="right", return_attention_mask=True))
    presets.build_tokenizer().save_pretrained(folder)


def _named(names: dict, prefix: str) -> dict[str, torch.Tensor]:
    """Checkpoint name → tensor (fused parameters split back into the checkpoint's tensors)."""
    out = {}
    for name, (param, index) in names.items():
        out[prefix + name] = (param.data if index is None else param.data[index]).contiguous().clone()
    return out


def _json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")
