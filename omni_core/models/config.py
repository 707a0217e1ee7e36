"""Model configuration: the fields of a Qwen3-Omni `config.json` the speech path uses.

Parsed once into frozen dataclasses and checked there; every module copies the
fields it needs. Names follow the HF config so a reader can cross-reference.
"""

from __future__ import annotations

from dataclasses import dataclass


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the problem."""


@dataclass(frozen=True)
class DecoderConfig:
    """A decoder-only transformer stack (thinker text model, talker, code predictor, codec)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    mrope_section: tuple[int, ...] | None = None  # interleaved MRoPE sections (thinker, talker)
    num_experts: int = 0  # 0: dense MLP in every layer
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0  # talker: sigmoid-gated shared expert
    sliding_window: int | None = None

    def __post_init__(self):
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                                  f"num_key_value_heads {self.num_key_value_heads}")
        if self.mrope_section is not None and sum(self.mrope_section) != self.head_dim // 2:
            raise CheckpointError(f"mrope_section {self.mrope_section} must sum to head_dim/2 = {self.head_dim // 2}")

    def is_moe_layer(self, i: int) -> bool:
        return (i not in self.mlp_only_layers and self.num_experts > 0
                and (i + 1) % self.decoder_sparse_step == 0)

    @classmethod
    def from_hf(cls, d: dict, **overrides) -> "DecoderConfig":
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        heads = d["num_attention_heads"]
        section = rope.get("mrope_section")
        values = dict(
            vocab_size=d.get("vocab_size", 0), hidden_size=d["hidden_size"],
            num_hidden_layers=d["num_hidden_layers"], num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads") or heads,
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            intermediate_size=d.get("intermediate_size", 0), rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", d.get("rope_theta", 10000.0)),
            mrope_section=tuple(section) if section else None,
            num_experts=d.get("num_experts") or d.get("num_local_experts") or 0, num_experts_per_tok=d.get("num_experts_per_tok", 0) or 0,
            moe_intermediate_size=d.get("moe_intermediate_size", 0) or 0,
            norm_topk_prob=bool(d.get("norm_topk_prob", False)),
            decoder_sparse_step=d.get("decoder_sparse_step", 1) or 1,
            mlp_only_layers=tuple(d.get("mlp_only_layers") or ()),
            shared_expert_intermediate_size=d.get("shared_expert_intermediate_size", 0) or 0,
            sliding_window=d.get("sliding_window"),
        )
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class CodecConfig:
    """Code2Wav: 16 codes per frame → waveform."""

    transformer: DecoderConfig  # sliding-window pre-transformer (no q/k norm)
    codebook_size: int
    num_quantizers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int
    layer_scale_initial_scale: float = 0.01

    @property
    def samples_per_frame(self) -> int:
        n = 1
        for r in self.upsample_rates + self.upsampling_ratios:
            n *= r
        return n


@dataclass(frozen=True)
class OmniConfig:
    thinker: DecoderConfig
    talker: DecoderConfig
    predictor: DecoderConfig
    codec: CodecConfig
    num_code_groups: int
    thinker_hidden_size: int
    speakers: dict[str, int]
    codec_ids: dict[str, int]  # codec_pad_id, codec_bos_id, codec_eos_token_id, codec_nothink_id, ...
    token_ids: dict[str, int]  # im_start, im_end, tts_pad, tts_bos, tts_eos, user, assistant
    torch_dtype: str = "float32"
    sample_rate: int = 24000
    family = "qwen3_omni"

    def __post_init__(self):
        if self.num_code_groups != self.codec.num_quantizers:
            raise CheckpointError(f"talker num_code_groups {self.num_code_groups} != code2wav num_quantizers "
                                  f"{self.codec.num_quantizers}")
        if self.talker.vocab_size < self.codec.codebook_size + 1024:
            raise CheckpointError("talker vocab_size must be at least codebook_size + 1024 (special codec ids)")

    @classmethod
    def from_hf(cls, d: dict) -> "OmniConfig":
        """The speech path's fields of a Qwen3-Omni config.json (a dict), checked: a missing or
        wrong field is a CheckpointError that names it."""
        try:
            return cls._from_hf(d)
        except KeyError as e:
            raise CheckpointError(f"config.json has no {e.args[0]!r} field, which the speech path needs: "
                                  "is it a complete Qwen3-Omni config?") from None

    @classmethod
    def _from_hf(cls, d: dict) -> "OmniConfig":
        if d.get("model_type") != "qwen3_omni_moe":
            raise CheckpointError(f"config.json has model_type {d.get('model_type')!r}, not 'qwen3_omni_moe': "
                                  "this is not a Qwen3-Omni checkpoint")
        try:
            th, tk, cw = d["thinker_config"], d["talker_config"], d["code2wav_config"]
            th_text = th["text_config"]
            predictor = tk["code_predictor_config"]
        except KeyError as e:
            raise CheckpointError(f"config.json lacks {e.args[0]!r}: not a full Qwen3-Omni checkpoint "
                                  "(the speech path needs thinker, talker and code2wav)") from None
        codec_keys = ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_nothink_id",
                      "codec_think_bos_id", "codec_think_eos_id")
        token_keys = ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos", "user", "assistant")
        return cls(
            thinker=DecoderConfig.from_hf(th_text),
            talker=DecoderConfig.from_hf(tk["text_config"]),
            predictor=DecoderConfig.from_hf(predictor),
            codec=CodecConfig(
                transformer=DecoderConfig.from_hf(cw, vocab_size=0, rms_norm_eps=cw.get("rms_norm_eps", 1e-5),
                                                  sliding_window=cw.get("sliding_window", 72)),
                codebook_size=cw.get("codebook_size", 2048), num_quantizers=cw.get("num_quantizers", 16),
                upsample_rates=tuple(cw.get("upsample_rates", (8, 5, 4, 3))),
                upsampling_ratios=tuple(cw.get("upsampling_ratios", (2, 2))),
                decoder_dim=cw.get("decoder_dim", 1536),
                layer_scale_initial_scale=cw.get("layer_scale_initial_scale", 0.01),
            ),
            num_code_groups=tk.get("num_code_groups", 16),
            thinker_hidden_size=tk.get("thinker_hidden_size", th_text["hidden_size"]),
            speakers={k.lower(): int(v) for k, v in (tk.get("speaker_id") or {}).items()},
            codec_ids={k: int(tk[k]) for k in codec_keys},
            token_ids={k: int(d[f"{k}_token_id"]) for k in token_keys},
            torch_dtype=str(d.get("torch_dtype") or d.get("dtype") or th_text.get("dtype") or "float32"),
        )
