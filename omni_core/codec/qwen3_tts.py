"""The Qwen3-TTS codec (12 Hz tokenizer, a checkpoint's `speech_tokenizer/`).

Decoder, codes [B, 16, T] → 24 kHz audio:

    split RVQ: codebook 0 (`rvq_first`) and 1..15 (`rvq_rest`), each codebook's vectors
      summed in order, each half's 1×1 `output_proj`; the two halves summed   [B, codebook_dim, T]
    → pre_conv: causal conv k=3                                             [B, latent, T]
    → pre_transformer: input_proj, sliding-window layers, norm, output_proj  [B, T, latent]
    → Code2Wav's back end (backend.py), its transposed convs trimmed on the
      right only: fully causal, exactly 1920 samples per frame              [B, 1, 1920·T]

Every part is causal, so the decoder streams through the same `CodecState` machinery as
Qwen3-Omni's Code2Wav (`StreamingDecoder`), and with nothing held back every frame's audio
comes out as soon as the frame does. The maths is qwen-tts's `Qwen3TTSTokenizerV2Decoder`;
parameter names follow the checkpoint (`decoder.…`).

Encoder: transformers' `MimiModel` (its encoder half), as the official package uses it; the
first `num_encoder_quantizers` (16) of its quantizers are the codes (`encode`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.codec.backend import (CausalConvNet, build_decoder, build_upsample, convolve, count_samples,
                                     synthesize)
from omni_core.codec.code2wav import Transformer
from omni_core.codec.state import CodecState
from omni_core.models.layers import Linear
from omni_core.models.qwen3_tts.config import SplitCodecConfig


class Codebook(nn.Module):
    """`_codebook`: vectors = embedding_sum / usage counts (EMA codebook statistics)."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.embedding_sum = nn.Parameter(torch.empty(size, dim))
        self.cluster_usage = nn.Parameter(torch.empty(size))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, T] → vectors [B, T, D] (computed in the weights' dtype, as the package does)."""
        vectors = self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]
        return F.embedding(codes, vectors)


class VectorQuantizer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class ResidualQuantizer(nn.Module):
    """`rvq_first` / `rvq_rest`: codebooks summed in order, then a 1×1 projection (no bias)."""

    def __init__(self, num_quantizers: int, size: int, dim: int, out_dim: int):
        super().__init__()
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList(VectorQuantizer(size, dim) for _ in range(num_quantizers))
        self.output_proj = nn.Conv1d(dim, out_dim, 1, bias=False)

    batched = False  # the streams of a batch in one oneDNN call (backend.py)

    def forward(self, codes: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """codes [B, n, T] (the first n of this half's codebooks) → [B, out_dim, T]; keep [B, n, T]
        bool zeroes single cells (code surgery)."""
        total = None
        for i in range(codes.shape[1]):
            v = self.vq.layers[i]._codebook(codes[:, i]).transpose(1, 2)  # [B, D, T]
            if keep is not None:
                v = v * keep[:, i, None, :].to(v.dtype)
            total = v if total is None else total + v
        return convolve(self.output_proj, total, self.batched)  # each row as alone (backend.py)


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: SplitCodecConfig):
        super().__init__()
        first, dim = cfg.num_semantic_quantizers, cfg.codebook_dim // 2
        self.num_first = first
        self.rvq_first = ResidualQuantizer(first, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = ResidualQuantizer(cfg.num_quantizers - first, cfg.codebook_size, dim, cfg.codebook_dim)

    def forward(self, codes: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """codes [B, k, T] (k ≤ 16: a coarser reconstruction leaves the rest out) → [B, codebook_dim, T]."""
        n = self.num_first
        part = (lambda lo, hi: None) if keep is None else (lambda lo, hi: keep[:, lo:hi])  # noqa: E731
        h = self.rvq_first(codes[:, :n], part(0, n))
        if codes.shape[1] > n:  # the package skips the acoustic half when only codebook 0 is given
            h = h + self.rvq_rest(codes[:, n:], part(n, codes.shape[1]))
        return h


class ProjectedTransformer(Transformer):
    """Code2Wav's sliding-window transformer between an input and an output projection."""

    def __init__(self, cfg: SplitCodecConfig):
        super().__init__(cfg.transformer, cfg.layer_scale_initial_scale)
        self.input_proj = Linear(cfg.latent_dim, cfg.transformer.hidden_size, bias=True)
        self.output_proj = Linear(cfg.transformer.hidden_size, cfg.latent_dim, bias=True)

    def forward(self, h: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """h [B, T, latent] → [B, T, latent]."""
        return self.output_proj(super().forward(self.input_proj(h), state))


class SplitDecoder(nn.Module):
    """`decoder.*` of speech_tokenizer/model.safetensors."""

    def __init__(self, cfg: SplitCodecConfig):
        super().__init__()
        self.quantizer = SplitQuantizer(cfg)
        self.pre_conv = CausalConvNet(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = ProjectedTransformer(cfg)
        self.upsample = build_upsample(cfg.latent_dim, cfg.upsampling_ratios)
        self.decoder = build_decoder(cfg.latent_dim, cfg, trim_left=False)

    def forward(self, codes: torch.Tensor, state: CodecState | None = None,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        h = self.pre_conv(self.quantizer(codes, keep), state).transpose(1, 2)  # [B, T, latent]
        h = self.pre_transformer(h, state).transpose(1, 2)  # [B, latent, T]
        return synthesize(self.upsample, self.decoder, h, state)


class TTSCodec(nn.Module):
    """The codec as the engine uses it: Code2Wav's interface (forward, num_samples, cfg, dtype),
    plus `encode` when the checkpoint has the encoder (`attach_encoder`)."""

    # Several streams in one call give each its own audio bit for bit (tests/test_tts_codec.py); the engine decodes
    # chunks of up to TOGETHER_FRAMES frames in one call, longer ones stream by stream: at the real widths one call
    # is faster for short chunks and slower for long ones row by row; batched (backend.py), one call of 8 streams'
    # 4- and 8-frame chunks was faster alone but not in the engine, where a step's codec time varied twice as much
    # (BENCHMARKS.md, "Code2Wav (the codec)").
    TOGETHER_FRAMES = 2

    def decodes_together(self, frames: int) -> bool:
        """Whether the engine decodes several streams' chunks of `frames` frames in one call."""
        return frames <= self.TOGETHER_FRAMES

    def __init__(self, cfg: SplitCodecConfig):
        super().__init__()
        self.cfg = cfg
        self.decoder = SplitDecoder(cfg)
        self.encoder = None  # MimiModel (transformers), encoder half only

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.pre_conv.conv.weight.dtype

    def forward(self, codes: torch.Tensor, num_codebooks: int | None = None, state: CodecState | None = None,
                keep: torch.Tensor | None = None) -> torch.Tensor:
        """codes [B, Q, T] → wav [B, 1, 1920·T]; num_codebooks=k uses the first k codebooks only
        (the others contribute nothing), `keep` [B, Q, T] bool drops single cells."""
        Q = self.cfg.num_quantizers
        k = Q if num_codebooks is None else num_codebooks
        if not 1 <= k <= Q or not k <= codes.shape[1] <= Q:
            raise ValueError(f"codes of shape {tuple(codes.shape)} with num_codebooks={num_codebooks}: "
                             f"expected [B, {Q}, T] (or at least the first num_codebooks rows), 1 <= k <= {Q}")
        return self.decoder(codes[:, :k], state, None if keep is None else keep[:, :k])

    def num_samples(self, num_frames: int) -> int:
        return count_samples(self, num_frames)

    @property
    def can_encode(self) -> bool:
        return self.encoder is not None

    @torch.no_grad()
    def encode(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [N] at 24 kHz, mono → codes [ceil(N / 1920), 16] int64 (the package's frame count)."""
        x = wav.to(self.encoder.dtype)[None, None]  # [1, 1, N]
        codes = self.encoder.encode(x, num_quantizers=self.cfg.num_encoder_quantizers).audio_codes  # [1, 16, T]
        frames = -(-wav.shape[0] // self.cfg.samples_per_frame)
        return codes[0, :, :frames].T.long()


# The checkpoint's encoder names (transformers 4.x MimiModel, as the package saves it) → this
# transformers' MimiModel, whose encoder half moved into `encoder.` (`encoder_seanet` for the convs).
ENCODER_RENAMES = (("encoder.layers.", "encoder.encoder_seanet.layers."),
                   ("encoder_transformer.", "encoder.encoder_transformer."), ("downsample.", "encoder.downsample."))


NO_WINDOW = 2**31 - 1  # encoder steps: past any clip (the page takes 60 s, 1500 steps)


def build_encoder(cfg: SplitCodecConfig, state: dict[str, torch.Tensor], device: torch.device | str = "cpu",
                  dtype: torch.dtype = torch.float32) -> nn.Module:
    """transformers' MimiModel from the codec's encoder_config, its decoder half removed (as the
    package's Qwen3TTSTokenizerV2Encoder does), filled from `state` (the checkpoint's `encoder.*`
    tensors, prefix dropped: parameters and the codebooks' statistics buffers), on `device` in `dtype`
    but for its rotary frequencies."""
    from transformers import MimiConfig, MimiModel

    from omni_core.models.config import CheckpointError

    # The official tokenizer attends over the whole clip: its transformers (4.57.3) runs the encoder
    # transformer once over all steps with a plain causal mask (`create_causal_mask`), and the eager and
    # sdpa attention it loads the tokenizer with never read `sliding_window`. This transformers masks
    # with the window (`create_sliding_window_causal_mask`), which changed every code from the window on
    # (2 steps a frame; the released 250 is 10 s of audio). A window longer than any clip is that mask.
    config = MimiConfig(**{**cfg.encoder, "sliding_window": NO_WINDOW})
    model = MimiModel(config)  # on the CPU: its rotary and conv buffers are made here
    model.decoder = None
    renamed = {}
    for name, tensor in state.items():
        for old, new in ENCODER_RENAMES:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        renamed[name] = tensor
    missing, unexpected = model.load_state_dict(renamed, strict=False)
    if missing or unexpected:
        names = sorted(missing) or sorted(unexpected)
        what = "lacks" if missing else "has unknown"
        raise CheckpointError(f"speech_tokenizer/model.safetensors {what} encoder tensors: {names[0]} "
                              f"({len(names)} in all)")
    # The rotary frequencies stay float32, as the package's are (made in float32, never cast): `.to(dtype)`
    # casts every floating buffer, and bfloat16 frequencies turn every position otherwise, which changed
    # bfloat16 codes (#41).
    rotary = {name: buf.clone() for name, buf in model.named_buffers() if name.endswith("inv_freq")}
    model.to(device, dtype)
    for name, buf in rotary.items():
        owner, leaf = name.rsplit(".", 1)
        setattr(model.get_submodule(owner), leaf, buf.to(device))
    return model.eval().requires_grad_(False)
