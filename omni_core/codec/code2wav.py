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
whole utterance, and `StreamingDecoder` (streaming.py) drives a stream. Parameter names follow the checkpoint with the
`code2wav.` prefix dropped. Nothing is computed in __init__ (code offsets and
RoPE tables are made in forward), so the model can be built on the meta device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.config import CodecConfig, DecoderConfig
from omni_core.models.layers import MLP, Attention, RMSNorm, Rope
from omni_core.codec import packed
from omni_core.codec.state import CodecState


def row_by_row(fn, x: torch.Tensor) -> torch.Tensor:
    """fn(x) for x [B, ...], one row at a time. oneDNN chooses its convolution by the batch size, and
    MKL its matmul by the row count, so a batch of streams (the engine decodes equal chunks together)
    would round each row's audio otherwise than its own decode does. Row by row, every row gets its
    solo floats (tests/test_streaming.py); the rest of the codec runs batched."""
    if x.shape[0] == 1:
        return fn(x)
    return torch.cat([fn(row) for row in x.split(1)])


class CausalConvNet(nn.Module):
    """Conv1d (stride 1) padded on the left only: output t sees inputs t - context .. t."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation  # past inputs each output needs

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C_in, T] → [B, C_out, T]."""
        if self.context == 0 and self.conv.groups == 1:  # kernel 1: a matmul over channels
            return self._pointwise(x)
        if state is None:
            x = F.pad(x, (self.context, 0))
        else:  # the previous chunk's last inputs (zeros at the start) replace the padding
            x = state.prepend(self, x, self.context, zeros_first=True)
        return row_by_row(lambda row: packed.conv(self.conv, row), x)  # a large weight runs packed (packed.py)

    def _pointwise(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel-1 conv as [C_out, C_in] @ [B, C_in, T]: the same sums, and 3-7x faster than
        oneDNN's convolution at the tiny codec's 4-16 channels on a CPU (measured: 34 vs 241 µs
        for 4 channels × 15360 samples)."""
        weight = self.conv.weight[:, :, 0]
        # Row by row as the convolutions: a batch is one GEMM of B·T rows, which MKL rounds otherwise than
        # T rows on some CPUs (an AMD EPYC; not the Xeon these tests were first run on).
        y = row_by_row(lambda row: torch.matmul(weight, row), x)
        return y if self.conv.bias is None else y + self.conv.bias[:, None]


class CausalTransConvNet(nn.Module):
    """ConvTranspose1d (kernel k, stride s): output j depends on inputs floor(j/s) and the m = k/s - 1
    before it. Qwen3-Omni trims k - s outputs on both sides (L inputs → (L - m)·s outputs: each
    output waits for the input after it); Qwen3-TTS trims only the right (`trim_left=False`: L
    inputs → L·s outputs, fully causal, nothing held back). With k = s (upsample) nothing is trimmed."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, trim_left: bool = True):
        super().__init__()
        if kernel_size not in (stride, 2 * stride):
            raise ValueError(f"transposed conv kernel {kernel_size} must be stride {stride} or twice it")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride, self.trim_left = stride, trim_left
        self.trim = kernel_size - stride
        self.overlap = kernel_size // stride - 1  # m: inputs an output shares with the next input

    def output_length(self, length: int) -> int:
        return (length - self.overlap) * self.stride if self.trim_left else length * self.stride

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C_in, L] → [B, C_out, output_length(L)]. Streaming prepends the last m inputs, so each
        chunk gives exactly the outputs its inputs made final."""
        new = x.shape[-1]
        if state is not None:
            x = state.prepend(self, x, self.overlap, zeros_first=False)
        y = row_by_row(lambda row: packed.conv(self.conv, row), x)
        if self.trim_left:
            return y[..., self.trim:y.shape[-1] - self.trim]
        past = x.shape[-1] - new  # carried inputs: their own outputs came out with the last chunk
        return y[..., past * self.stride:(past + new) * self.stride]


class SnakeBeta(nn.Module):
    """x + sin²(x·e^alpha) / e^beta, per channel; elementwise in time, so nothing to carry.

    HF's expression, `x + 1 / (e^beta + 1e-9) * sin(x·e^alpha)²`, op for op and so bit for bit, computed in
    one buffer: one new tensor of the chunk's size instead of four (the decoder's last blocks are megabytes),
    about twice as fast (docs/benchmarks-history.md (q))."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C, T] → [B, C, T]."""
        scale = 1.0 / (self.beta.exp()[None, :, None] + 1e-9)
        y = x * self.alpha.exp()[None, :, None]
        y.sin_()
        y.pow_(2)
        y.mul_(scale)  # scale·s = s·scale, and y + x = x + y: IEEE products and sums commute
        return y.add_(x)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (k=7), then a per-step LayerNorm + MLP, scaled by gamma, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConvNet(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C, T] → [B, C, T]."""
        h = self.dwconv(x, state).transpose(1, 2)  # [B, T, C]
        h = row_by_row(lambda r: self.pwconv2(F.gelu(self.pwconv1(self.norm(r)))), h)
        return x + (self.gamma * h).transpose(1, 2)


class DecoderResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConvNet(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConvNet(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C, T] → [B, C, T]."""
        h = self.conv1(self.act1(x), state)
        return x + self.conv2(self.act2(h), state)


class DecoderBlock(nn.Module):
    """SnakeBeta, transposed conv ×rate (channels halve), residual units with dilations 1, 3, 9."""

    def __init__(self, in_dim: int, rate: int, trim_left: bool = True):
        super().__init__()
        out_dim = in_dim // 2
        units = [DecoderResidualUnit(out_dim, dilation) for dilation in (1, 3, 9)]
        up = CausalTransConvNet(in_dim, out_dim, 2 * rate, rate, trim_left)
        self.block = nn.ModuleList([SnakeBeta(in_dim), up, *units])

    def forward(self, x: torch.Tensor, state: CodecState | None = None) -> torch.Tensor:
        """x: [B, C, L] → [B, C/2, (L - 1)·rate] (trim_left) or [B, C/2, L·rate]."""
        for module in self.block:
            x = module(x, state)
        return x


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


def build_upsample(dim: int, ratios: tuple[int, ...]) -> nn.ModuleList:
    """`upsample`: (transposed conv ×f, ConvNeXt) for f in ratios, at `dim` channels."""
    return nn.ModuleList(nn.ModuleList([CausalTransConvNet(dim, dim, f, f), ConvNeXtBlock(dim)]) for f in ratios)


def build_decoder(in_dim: int, cfg: CodecConfig, trim_left: bool = True) -> nn.ModuleList:
    """`decoder`: conv to decoder_dim; a DecoderBlock per upsample rate; SnakeBeta; conv to 1 channel."""
    dim = cfg.decoder_dim
    decoder = [CausalConvNet(in_dim, dim, 7)]
    for i, rate in enumerate(cfg.upsample_rates):
        decoder.append(DecoderBlock(dim // 2 ** i, rate, trim_left))
    out_dim = dim // 2 ** len(cfg.upsample_rates)
    return nn.ModuleList(decoder + [SnakeBeta(out_dim), CausalConvNet(out_dim, 1, 7)])


def synthesize(upsample: nn.ModuleList, decoder: nn.ModuleList, h: torch.Tensor,
               state: CodecState | None = None) -> torch.Tensor:
    """The back end both codecs share: h [B, C, T] → wav [B, 1, S] in [-1, 1]."""
    for blocks in upsample:
        for block in blocks:
            h = block(h, state)  # [B, C, f·L]
    for block in decoder:
        h = block(h, state)
    return h.clamp(min=-1, max=1)


def count_samples(module: nn.Module, num_frames: int) -> int:
    """Samples a whole-utterance decode of `num_frames` frames yields through `module`'s transposed convs."""
    length = num_frames
    for m in module.modules():
        if isinstance(m, CausalTransConvNet):
            length = m.output_length(length)
    return length


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
        its own decode's bits (`row_by_row`; tiny and real widths), and one call of several one-frame chunks is
        faster than one by one at tiny and real widths (docs/benchmarks-history.md (f), "with batched codec
        pushes")."""
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
