"""The codecs' convolutional back end, shared by Code2Wav and Qwen3-TTS's codec: causal convolutions,
SnakeBeta, ConvNeXt blocks, the upsampling stages and the decoder (`synthesize`: h [B, C, T] → wav).

    upsample: (transposed conv ×f, ConvNeXt) for f in upsampling_ratios       [B, C, T·Πf]
    decoder:  conv; (SnakeBeta, transposed conv ×r, 3 residual units) for r in
              upsample_rates; SnakeBeta; conv to 1 channel                      [B, 1, S]

Everything is causal: every module takes an optional `state` (a `CodecState`, state.py) carrying its
left context between chunks; `state=None` decodes a whole utterance.

A batch of streams (the engine decodes equal chunks together) must give each stream its own decode's bits.
Two ways (`batched`, set for a whole codec by `use_batched`, decided at load by codec/batching.py):
- row by row (`row_by_row`: exact mode's, and where batched does not hold): each row's convolutions and matmuls
  are calls of their own, the kernels the official code calls for one stream;
- batched (the default mode's where it holds): every convolution wider than 1x1, the transposed ones included,
  is one call of oneDNN's forward convolution over the whole batch (`convolve`), which computes each row as it
  would alone on the machines probed (codec/batching.py checks it at load). F.conv1d cannot be used: it sends a
  lone small input to ATen's own kernel and a batch to oneDNN. A transposed convolution runs as a regular one
  over its stride's phases (`CausalTransConvNet.phases`): oneDNN's transposed kernel rounded some rows of a batch
  otherwise than alone. The 1x1 convolutions and the ConvNeXt MLPs stay matmuls row by row (oneDNN is slow at
  the tiny codec's few channels), but for Qwen3-TTS's quantizer projection (`convolve`, at the codebook
  widths). The sums run in another order than the official kernels': the audio is within rounding of theirs,
  not bit for bit.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.config import CodecConfig
from omni_core.codec import packed
from omni_core.codec.state import CodecState


_phases: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # transposed conv → (weight key, its phases' Conv1d):
# not on the module, so its state_dict and checkpoint loading see the checkpoint's parameters only
_lock = threading.Lock()


def use_batched(codec: nn.Module, on: bool) -> None:
    """Every module of `codec` that has the choice (a class attribute `batched`) batched (one oneDNN call for the
    whole batch) or row by row."""
    for module in codec.modules():
        if hasattr(type(module), "batched"):
            module.batched = on


def runs_batched(codec: nn.Module) -> bool:
    """Whether `codec` runs a batch of streams batched (`use_batched`)."""
    return any(getattr(module, "batched", False) for module in codec.modules())


def convolve(conv: nn.Conv1d, x: torch.Tensor, batched: bool) -> torch.Tensor:
    """conv(x) for x [B, C_in, T] (conv unpadded, stride 1): batched, one oneDNN forward convolution for the whole
    batch (a large weight packed: packed.py); else each row alone (`row_by_row`)."""
    if not batched:
        return row_by_row(lambda row: packed.conv(conv, row), x)
    return packed.conv(conv, x, lambda x: torch.ops.aten.mkldnn_convolution(
        x, conv.weight, conv.bias, [0], [1], list(conv.dilation), conv.groups), small=True)


def row_by_row(fn, x: torch.Tensor) -> torch.Tensor:
    """fn(x) for x [B, ...], one row at a time. F.conv1d chooses its kernel by the batch size, and
    MKL its matmul by the row count, so a batch of streams (the engine decodes equal chunks together)
    would round each row's audio otherwise than its own decode does. Row by row, every row gets its
    solo floats (tests/test_streaming.py); the rest of the codec runs batched."""
    if x.shape[0] == 1:
        return fn(x)
    return torch.cat([fn(row) for row in x.split(1)])


class CausalConvNet(nn.Module):
    """Conv1d (stride 1) padded on the left only: output t sees inputs t - context .. t."""

    batched = False  # a batch of streams in one oneDNN call (module docstring)

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
        return convolve(self.conv, x, self.batched)

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

    batched = False  # a batch of streams in one oneDNN call (module docstring)

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
        if self.batched:  # the outputs of inputs 0..L-1; input L-1's overlap with the next is cut in either trim
            L, s = x.shape[-1], self.stride
            z = convolve(self.phases(), F.pad(x, (self.overlap, 0)), True)  # [B, s·C_out, L]
            y = z.view(z.shape[0], s, -1, L).permute(0, 2, 3, 1).reshape(z.shape[0], -1, L * s)  # output i·s + p
            return y[..., self.trim:] if self.trim_left else y[..., (L - new) * s:]
        y = row_by_row(lambda row: packed.conv(self.conv, row), x)
        if self.trim_left:
            return y[..., self.trim:y.shape[-1] - self.trim]
        past = x.shape[-1] - new  # carried inputs: their own outputs came out with the last chunk
        return y[..., past * self.stride:(past + new) * self.stride]

    @torch.no_grad()
    def phases(self) -> nn.Conv1d:
        """The transposed conv as a regular one over the input and the m before it, each phase p of the stride a
        group of output channels: output i·s + p = sum over taps t of w[:, :, p + t·s] · x[i - t], so phase p's
        channel o has weight w[:, o, p + t·s] at tap m - t. [C_in, C_out, k] → Conv1d(C_in, s·C_out, m + 1),
        made once per weight (the stride's phases replace oneDNN's transposed kernel: module docstring)."""
        w, b = self.conv.weight, self.conv.bias
        key = (w.data_ptr(), w._version, w.dtype, w.device)
        with _lock:
            held = _phases.get(self)
            if held is not None and held[0] == key:
                return held[1]
        C_in, C_out, k = w.shape
        s, taps = self.stride, self.overlap + 1
        phases = nn.Conv1d(C_in, s * C_out, taps, bias=b is not None, device=w.device, dtype=w.dtype)
        phases.weight.copy_(w.view(C_in, C_out, taps, s).flip(2).permute(3, 1, 0, 2).reshape(s * C_out, C_in, taps))
        if b is not None:
            phases.bias.copy_(b.repeat(s))
        phases.requires_grad_(False)
        with _lock:
            _phases[self] = (key, phases)
        return phases


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
