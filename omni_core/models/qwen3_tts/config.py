"""A Qwen3-TTS checkpoint's config.json (and speech_tokenizer/config.json), read into dataclasses.

Names follow the checkpoint. The config classes of the official package leave fields the
code needs undeclared (`text_vocab_size`, `head_dim`, `mrope_section` inside `rope_scaling`,
`spk_is_dialect`, the codec's `codebook_dim`); they are read here and their absence is a
CheckpointError naming the field. docs/QWEN3_TTS.md has what each field means.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omni_core.models.config import CheckpointError, CodecConfig, DecoderConfig
from omni_core.models.sampling import SamplingConfig

KINDS = ("custom_voice", "voice_design", "base")
CODEC_KEYS = ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_think_id", "codec_nothink_id",
              "codec_think_bos_id", "codec_think_eos_id")
TOKEN_KEYS = ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos")
# The wrapper's generation defaults; generation_config.json overrides each (qwen3_tts_model.py).
GENERATION_DEFAULTS = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                           subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0,
                           subtalker_temperature=0.9, max_new_tokens=2048)


@dataclass(frozen=True)
class SplitCodecConfig(CodecConfig):
    """The 12 Hz codec: split RVQ (1 + 15) front end on Code2Wav's back end, and Mimi's encoder."""

    codebook_dim: int = 512  # the two RVQ halves project codebook_dim / 2 → codebook_dim
    latent_dim: int = 1024  # pre_conv output, the transformer's input/output projections, the back end
    num_semantic_quantizers: int = 1
    encoder: dict | None = None  # MimiConfig fields; None: no encoder in the checkpoint
    num_encoder_quantizers: int = 16  # encoder_valid_num_quantizers: the first 16 of Mimi's 32
    sample_rate: int = 24000


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """ECAPA-TDNN (Base models): 128-bin log-mel → an x-vector as wide as the talker."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000


@dataclass(frozen=True)
class TTSConfig:
    talker: DecoderConfig
    predictor: DecoderConfig
    codec: SplitCodecConfig
    kind: str  # tts_model_type: custom_voice | voice_design | base
    size: str  # tts_model_size: "0b6", "1b7"
    num_code_groups: int
    text_vocab_size: int
    text_hidden_size: int
    speakers: dict[str, int]  # lower-cased name → codec id
    dialects: dict[str, str]  # dialect speaker → the language key that replaces `chinese` / `auto`
    languages: dict[str, int]  # lower-cased codec_language_id (dialects included)
    codec_ids: dict[str, int]
    token_ids: dict[str, int]
    generation: dict = field(default_factory=dict)
    speaker_encoder: SpeakerEncoderConfig | None = None
    torch_dtype: str = "float32"
    sample_rate: int = 24000
    family = "qwen3_tts"

    def __post_init__(self):
        if self.num_code_groups != self.codec.num_quantizers:
            raise CheckpointError(f"talker num_code_groups {self.num_code_groups} != the codec's num_quantizers "
                                  f"{self.codec.num_quantizers}")
        if self.talker.vocab_size < self.codec.codebook_size + 1024:
            raise CheckpointError("talker vocab_size must be at least codebook_size + 1024 (special codec ids)")
        if self.kind == "base" and self.speaker_encoder is None:
            raise CheckpointError("a Base checkpoint needs speaker_encoder_config")

    @property
    def language_names(self) -> list[str]:
        """What a request may name: auto, then every language that is not a dialect."""
        return ["auto"] + sorted(k for k in self.languages if "dialect" not in k)

    @property
    def accepts_instruct(self) -> bool:
        """VoiceDesign needs one; a CustomVoice model takes one unless it is a 0.6B
        (the package drops it there); Base has no instruction."""
        return self.kind == "voice_design" or (self.kind == "custom_voice" and self.size != "0b6")

    @property
    def default_text_input(self) -> str:
        """The package's wrapper: whole text for custom voice and voice design, streaming for a clone."""
        return "streaming" if self.kind == "base" else "whole"

    @property
    def talker_sampling(self) -> SamplingConfig:
        g = self.generation
        return SamplingConfig(bool(g["do_sample"]), float(g["temperature"]), int(g["top_k"]), float(g["top_p"]))

    @property
    def predictor_sampling(self) -> SamplingConfig:
        g = self.generation
        return SamplingConfig(True, float(g["subtalker_temperature"]), int(g["subtalker_top_k"]),
                              float(g["subtalker_top_p"]))

    @classmethod
    def from_hf(cls, d: dict, codec: dict, generation: dict | None = None) -> "TTSConfig":
        if d.get("model_type") != "qwen3_tts":
            raise CheckpointError(f"config.json has model_type {d.get('model_type')!r}, not 'qwen3_tts'")
        try:
            tk = d["talker_config"]
            cp = tk["code_predictor_config"]
            return cls(
                talker=_decoder(tk, "talker_config"), predictor=_decoder(cp, "code_predictor_config"),
                codec=codec_config(codec), kind=_kind(d), size=str(d.get("tts_model_size") or ""),
                num_code_groups=tk["num_code_groups"], text_vocab_size=tk["text_vocab_size"],
                text_hidden_size=tk["text_hidden_size"],
                speakers={k.lower(): int(v) for k, v in (tk.get("spk_id") or {}).items()},
                dialects=_dialects(tk), languages={k.lower(): int(v) for k, v in (tk.get("codec_language_id") or {}).items()},
                codec_ids={k: int(tk[k]) for k in CODEC_KEYS},
                token_ids={k: int(d[f"{k}_token_id"]) for k in TOKEN_KEYS},
                generation={**GENERATION_DEFAULTS, **(generation or {})},
                speaker_encoder=_speaker_encoder(d) if _kind(d) == "base" else None,
                torch_dtype=str(d.get("torch_dtype") or d.get("dtype") or "float32"),
            )
        except KeyError as e:
            raise CheckpointError(f"config.json lacks {e.args[0]!r}: not a complete Qwen3-TTS checkpoint") from None


def _kind(d: dict) -> str:
    kind = d.get("tts_model_type")
    if kind not in KINDS:
        raise CheckpointError(f"config.json has tts_model_type {kind!r}: expected one of {', '.join(KINDS)}")
    return kind


def _decoder(d: dict, name: str) -> DecoderConfig:
    if "head_dim" not in d and d["hidden_size"] % d["num_attention_heads"]:
        raise CheckpointError(f"{name} has no head_dim and hidden_size is not a multiple of the heads")
    # Sliding windows are off unless use_sliding_window says otherwise (the configs carry a window anyway).
    window = d.get("sliding_window") if d.get("use_sliding_window") else None
    return DecoderConfig.from_hf(d, sliding_window=window)


def _dialects(tk: dict) -> dict[str, str]:
    spk = {k.lower() for k in tk.get("spk_id") or {}}
    flags = {k.lower(): v for k, v in (tk.get("spk_is_dialect") or {}).items()}
    missing = sorted(spk - set(flags))
    if missing:
        raise CheckpointError(f"talker_config.spk_is_dialect has no entry for {', '.join(missing)} "
                              "(the package reads it for every speaker)")
    return {k: str(v).lower() for k, v in flags.items() if v}


def _speaker_encoder(d: dict) -> SpeakerEncoderConfig:
    raw = d.get("speaker_encoder_config") or {}
    known = SpeakerEncoderConfig.__dataclass_fields__
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in known}
    return SpeakerEncoderConfig(**values)


def codec_config(d: dict) -> SplitCodecConfig:
    """speech_tokenizer/config.json (model_type qwen3_tts_tokenizer_12hz)."""
    if d.get("model_type") != "qwen3_tts_tokenizer_12hz":
        raise CheckpointError(f"speech_tokenizer/config.json has model_type {d.get('model_type')!r}, "
                              "not 'qwen3_tts_tokenizer_12hz' (only the 12 Hz codec is supported)")
    dec = d.get("decoder_config") or {}
    if "codebook_dim" not in dec:
        raise CheckpointError("speech_tokenizer/config.json decoder_config lacks 'codebook_dim'")
    dec = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16,
           "intermediate_size": 3072, **dec}
    return SplitCodecConfig(
        transformer=DecoderConfig.from_hf(dec, vocab_size=0, rms_norm_eps=dec.get("rms_norm_eps", 1e-5),
                                          rope_theta=dec.get("rope_theta", 10000.0),
                                          sliding_window=dec.get("sliding_window", 72)),
        codebook_size=dec.get("codebook_size", 2048), num_quantizers=dec.get("num_quantizers", 16),
        upsample_rates=tuple(dec.get("upsample_rates", (8, 5, 4, 3))),
        upsampling_ratios=tuple(dec.get("upsampling_ratios", (2, 2))), decoder_dim=dec.get("decoder_dim", 1536),
        layer_scale_initial_scale=dec.get("layer_scale_initial_scale", 0.01), codebook_dim=dec["codebook_dim"],
        latent_dim=dec.get("latent_dim", 1024), encoder=d.get("encoder_config"),
        num_encoder_quantizers=d.get("encoder_valid_num_quantizers", 16),
        sample_rate=d.get("output_sample_rate", 24000),
    )


def read_tts_config(path: Path) -> TTSConfig:
    """config.json, speech_tokenizer/config.json and generation_config.json of a checkpoint folder."""
    codec_file = path / "speech_tokenizer" / "config.json"
    if not codec_file.is_file():
        raise CheckpointError(f"{codec_file} is missing: a Qwen3-TTS checkpoint carries its codec in speech_tokenizer/")
    gen_file = path / "generation_config.json"
    generation = _json(gen_file) if gen_file.is_file() else {}
    return TTSConfig.from_hf(_json(path / "config.json"), _json(codec_file), generation)


def _json(file: Path) -> dict:
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{file} cannot be read as JSON: {e}") from None
