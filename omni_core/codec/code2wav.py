"""Code2Wav: 16 codes per 80 ms frame → 24 kHz waveform (the Qwen3-Omni codec).

    codes [B, 16, T] → code_embedding, mean over the 16 quantizers    [B, T, C]
      → pre_transformer: sliding-window causal attention, RoPE 0..T-1  [B, T, C]
      → upsample: (transposed conv ×f, ConvNeXt) for f in (2, 2)       [B, C, 4T]
      → decoder: conv; 4 × (SnakeBeta, transposed conv ×r, 3 residual
        units) for r in (8, 5, 4, 3); SnakeBeta; conv                  [B, 1, S]
      → clamp to [-1, 1]

S = 1920·T - 555: each decoder transposed conv trims one input's worth of output
at the end (see `CausalTransConvNet`). The maths is HF `Qwen3OmniMoeCode2Wav`'s.

Everything is causal, so every module takes an optional `state` (a `CodecState`,
codec_state.py) carrying its left context between chunks; `state=None` decodes a
whole utterance, and `StreamingDecoder` (streaming.py) drives a stream. The pre-transformer is here; the
upsampling and the decoder are the back end both codecs share (backend.py). Parameter names follow the checkpoint with the
`code2wav.` prefix dropped. Nothing is computed in __init__ (code offsets and
RoPE tables are made in forward), so the model can be built on the meta device.
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.codec.backend import build_decoder, build_upsample, count_samples, synthesize
from omni_core.codec.state import CodecState
from omni_core.models.config import CodecConfig, DecoderConfig
from omni_core.models.layers import MLP, Attention, RMSNorm, Rope


class LayerScale(nn.Module):
    def __init__(self, dim: int, initial_scale: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class TransformerLayer(nn.Module):
    """Pre-norm attention + SwiGLU MLP, each residual branch scaled by a LayerScale; no q/k norm."""

    def __init__(self, cfg: DecoderConfig, index: int, initial_scale: float):
        super().__init__()
        self.index = index
        self.self_attn = Attention(cfg, qk_norm=False)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, initial_scale)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, initial_scale)

    def forward(self, h, cos, sin, mask, cache=None):
        attn = self.self_attn(self.input_layernorm(h), cos, sin, cache, self.index, mask)
        h = h + self.self_attn_layer_scale(attn)
        return h + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(h)))


class Transformer(nn.Module):
    """The pre-transformer: every layer attends causally to the last `sliding_window` positions."""

    def __init__(self, cfg: DecoderConfig, initial_scale: float):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(cfg, i, initial_scale) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)
        self.sliding_window = cfg.sliding_window

    def forward(self, h: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """h: [B, T, C] at positions start..start+T-1 (start = frames already decoded) → normed [B, T, C]."""
        T = h.shape[1]
        start, cache = (state.position, state.kv) if state is not None else (0, None)
        num_past = cache.length if cache is not None else 0
        keys = torch.arange(start - num_past, start + T, device=h.device)  # cached + new positions
        queries = keys[num_past:]
        distance = queries[:, None] - keys[None, :]  # [T, num_past + T]
        mask = (distance >= 0) & (distance < self.sliding_window)
        cos, sin = self.rope(queries, h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin, mask, cache)
        if state is not None:
            state.advance(T)
        return self.norm(h)


class Code2Wav(nn.Module):
    def __init__(self, cfg: CodecConfig):
        super().__init__()
        self.cfg = cfg
        C = cfg.transformer.hidden_size
        self.pre_transformer = Transformer(cfg.transformer, cfg.layer_scale_initial_scale)
        self.code_embedding = nn.Embedding(cfg.codebook_size * cfg.num_quantizers, C)  # quantizer q: rows q·size..
        self.upsample = build_upsample(C, cfg.upsampling_ratios)
        self.decoder = build_decoder(C, cfg)

    @property
    def dtype(self) -> torch.dtype:
        return self.code_embedding.weight.dtype

    def decodes_together(self, frames: int) -> bool:
        """Whether the engine decodes several streams' chunks of `frames` frames in one call: always. Each row gets
        its own decode's bits (row by row or batched: backend.py; tiny and real widths), and one call of several
        one-frame chunks is faster than one by one at tiny and real widths (docs/benchmarks-history.md (f), "with
        batched codec pushes")."""
        return True

    def forward(self, codes: torch.Tensor, num_codebooks: int | None = None,
                state: CodecState | None = None, keep: torch.Tensor | None = None) -> torch.Tensor:
        """codes: [B, Q, T] → wav [B, 1, num_samples(T)] in [-1, 1].

        `state` continues a stream (see `StreamingDecoder`): the output is then only the new final samples.
        `keep` [B, Q, T] bool: cells marked False contribute nothing (see `embed`).
        """
        h = self.embed(codes, num_codebooks, keep)  # [B, T, C]
        h = self.pre_transformer(h, state).transpose(1, 2)  # [B, C, T]
        return synthesize(self.upsample, self.decoder, h, state)

    def embed(self, codes: torch.Tensor, num_codebooks: int | None = None,
              keep: torch.Tensor | None = None) -> torch.Tensor:
        """codes: [B, Q, T] → [B, T, C], the mean over the Q quantizers' embeddings.

        With `num_codebooks=k`, a coarser RVQ reconstruction: only the first k codebooks count
        and the others contribute nothing, i.e. (sum of the first k embeddings) / Q, not a mean
        over k: the residual levels left out are zero, as a k-level quantizer would give.
        Codes may then carry just the first k rows. `keep` [B, Q, T] bool drops single cells the
        same way (False: that code's embedding is zero), e.g. one codebook over some frames.
        """
        Q = self.cfg.num_quantizers
        k = Q if num_codebooks is None else num_codebooks
        if not 1 <= k <= Q or not k <= codes.shape[1] <= Q:
            raise ValueError(f"codes of shape {tuple(codes.shape)} with num_codebooks={num_codebooks}: "
                             f"expected [B, {Q}, T] (or at least the first num_codebooks rows), 1 <= k <= {Q}")
        offsets = torch.arange(k, device=codes.device)[None, :, None] * self.cfg.codebook_size  # [1, k, 1]
        emb = self.code_embedding(codes[:, :k] + offsets)  # [B, k, T, C]
        if keep is not None:
            emb = emb * keep[:, :k, :, None].to(emb.dtype)
        return emb.sum(1) / Q

    def num_samples(self, num_frames: int) -> int:
        """Samples a whole-utterance decode of `num_frames` frames yields."""
        return count_samples(self, num_frames)
