"""Weight-only int8 and int4: `load_pipeline(quantize="int8" | "int4" | "mixed")`.

Decoding one request reads every weight once per step and does little arithmetic with it,
so its speed is the weights' bytes over the memory bandwidth. int8 weights halve a
bfloat16 model's bytes. Each large matmul of the talker, the code predictor (and its
heads) and the thinker becomes an `Int8Linear`:

    weight [N, K] (float) → qweight int8 [N, K] = round(weight / scale), scale [N] = max|row| / 127

symmetric, one scale per output channel, computed in float32 from the loaded weight. The
product is torch's weight-only kernel `aten._weight_int8pack_mm(x [M, K], qweight, scale)`,
whose vectorized x86 path takes bfloat16 activations: a call casts its rows to bfloat16 and
its result back. That kernel computes every row on its own (no reduction across rows), so a
row's bits do not depend on the other rows of the call: batch-invariant without a plan.
It reads a weight at the memory's speed for a few rows, but for a prompt's many it is slower than a bfloat16
GEMM (41 rows of the 0.6B talker: 306 ms against 151 on a Zen 4): a prompt piece of PIECE_GEMM_ROWS rows or
more (`invariant.prompt_pieces`) is multiplied by its weight's int8 values copied into a bfloat16 scratch
(exact: |q| <= 127) in one GEMM of its own rows, then by the scales (`piece_product`). A piece's bits then
depend on its own length alone, as the float weights' pieces do.
Embeddings, norms, the MoE's stacked experts and the codec stay in float: they are rows
read by index, arithmetic-bound, or (the codec) reported to hiss when quantized.

int4 (`Int4Linear`) halves the bytes again: groups of GROUP weights along K, each with its own
scale and offset (asymmetric, 16 levels), through `aten._weight_int4pack_mm_for_cpu`, which
also computes each row on its own. Its error is about 15 times int8's (a product's relative
error ~8% against ~0.5% for Gaussian weights), so it is measured, not assumed (the benchmark docs).

mixed puts int4 in the largest weights and int8 where the precision is: the decoder layers of the
talker (and the thinker) in int4, the code predictor, the heads and the text projections in int8.
The predictor writes 15 of a frame's 16 codes, each from the last, so its error compounds within
the frame; the talker's layers are the largest weights read once a frame (0.6B: 440 M parameters,
0.88 GB in bfloat16, against the predictor's 110 M, re-read for each of its 15 steps).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models.invariant import Linear, pieces_now

MODES = ("int8", "int4", "mixed")
MIN_WEIGHTS = 1 << 16  # smaller matmuls (gates, the tiny model's) stay in float: their bytes cost nothing
GROUP = 32  # int4 weights per scale and offset: the smallest group the kernel takes, the least error
INNER_K_TILES = 2  # the int4 kernel's packing of K (its CPU layout)
PIECE_GEMM_ROWS = 16  # a prompt piece of at least this many rows takes the GEMM (module docstring); where the
# kernel and the GEMM cross on a Zen 4 (16 rows of the 0.6B talker: 124 ms against 113). A fixed rule, not a
# timing, so that a prompt's bits are the same in every process on a machine.
_SCRATCH = threading.local()  # each thread's bfloat16 scratch for a dequantized weight (`scratch_copy`)


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] → (int8 [N, K], bfloat16 scales [N]) with weight ≈ qweight * scale[:, None]."""
    w = weight.detach().float()
    # The kernel's scales are bfloat16: round them first, so the codes fit the scale the kernel multiplies by.
    scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-30).to(torch.bfloat16)  # an all-zero row keeps a usable scale
    qweight = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return qweight.contiguous(), scale


class QuantizedLinear(nn.Module):
    """A Linear whose weight a CPU kernel holds quantized: rows in bfloat16 through `product`, in x's dtype out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)  # [M, K]
        out = self.product(rows).to(x.dtype)  # [M, N]
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)


class Int8Linear(QuantizedLinear):
    """y = x @ (qweight * scale).T + bias through the int8 kernel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        qweight, scale = quantize_weight(linear.weight)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.bias = linear.bias  # float, as loaded

    def product(self, rows: torch.Tensor) -> torch.Tensor:
        sizes = pieces_now()
        if sizes is not None and rows.shape[0] != sum(sizes):
            raise ValueError(f"a prefill call of {rows.shape[0]} rows for pieces of {list(sizes)} positions")
        if sizes is None or max(sizes) < PIECE_GEMM_ROWS:  # the kernel: each row as alone
            return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scale)
        out = [self.piece_product(piece) for piece in rows.split(sizes)]
        return out[0] if len(out) == 1 else torch.cat(out)

    def piece_product(self, rows: torch.Tensor) -> torch.Tensor:
        """One prompt piece's rows [M, K] bfloat16 → [M, N]: the kernel under PIECE_GEMM_ROWS rows, else one GEMM
        by the int8 values in bfloat16, then the scales (two roundings to bfloat16 where the kernel makes one)."""
        if rows.shape[0] < PIECE_GEMM_ROWS:
            return torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scale)
        return F.linear(rows, scratch_copy(self.qweight)) * self.scale

    def dequantized(self) -> torch.Tensor:
        """The weight this layer multiplies by, in float32 [N, K] (for tests and error measurements)."""
        return self.qweight.float() * self.scale.float()[:, None]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def scratch_copy(qweight: torch.Tensor) -> torch.Tensor:
    """qweight's values in bfloat16 [N, K], in the calling thread's scratch (grown to the largest weight): a new
    tensor per call would fault in fresh pages for every weight of every prompt (248 against 208 ms for 41 rows of
    the 0.6B talker on a Zen 4), and the scratch stays in the caches. Valid until this thread's next call."""
    n, scratch = qweight.numel(), getattr(_SCRATCH, "buffer", None)
    if scratch is None or scratch.device != qweight.device or scratch.numel() < n:
        scratch = _SCRATCH.buffer = torch.empty(n, dtype=torch.bfloat16, device=qweight.device)
    return scratch[:n].view(qweight.shape).copy_(qweight)


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] → (the kernel's packed int4 weight, bfloat16 scales and offsets [K / GROUP, N, 2]), with
    each group's weights ≈ code * scale + low, code in 0..15 (the kernel stores the offset as low + 8 * scale)."""
    N, K = weight.shape
    w = weight.detach().float().view(N, K // GROUP, GROUP)
    low, high = w.amin(-1), w.amax(-1)  # [N, K / GROUP]
    scale = ((high - low) / 15).clamp(min=1e-30).to(torch.bfloat16).float()  # the kernel's scales are bfloat16
    codes = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(N, K)
    offset = (low + 8 * scale).to(torch.bfloat16).float()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, INNER_K_TILES)
    return packed, torch.stack([scale, offset], -1).transpose(0, 1).contiguous().to(torch.bfloat16)


class Int4Linear(QuantizedLinear):
    """y = x @ dequantized(weight).T + bias through the int4 kernel."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        packed, scales = quantize_int4(linear.weight)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("qweight", packed)
        self.register_buffer("scale", scales)  # [K / GROUP, N, 2]: scale, offset
        self.bias = linear.bias

    def product(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.qweight, GROUP, self.scale)

    def dequantized(self) -> torch.Tensor:
        """The weight this layer multiplies by, in float32 [N, K]: the kernel applied to the identity."""
        eye = torch.eye(self.in_features, dtype=torch.bfloat16)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.qweight, GROUP, self.scale).float().T

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4, group {GROUP}"


def quantize_modules(modules, mode: str = "int8") -> int:
    """Replace every large `Linear` under `modules` (the thinker, the talker with its code predictor)
    by an `Int8Linear` (mode "int8") or `Int4Linear` (mode "int4"; "mixed": int4 under each root's decoder
    stack `.model`, int8 elsewhere; a weight whose K is not a multiple of GROUP stays int8), in place.
    Returns the bytes the weights shrank by."""
    if mode not in MODES:
        raise ValueError(f"quantize must be one of {', '.join(MODES)} (got {mode!r})")
    saved = 0
    for root in modules:
        for path, parent in list(root.named_modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, Linear) and child.weight.numel() >= MIN_WEIGHTS:
                    small = Int4Linear(child) if wants_int4(mode, path, child) else Int8Linear(child)
                    saved += child.weight.numel() * child.weight.element_size() - weight_bytes(small)
                    setattr(parent, name, small)
    return saved


def wants_int4(mode: str, path: str, linear: Linear) -> bool:
    """Whether `linear`, a child of the module at `path` (relative to the thinker or talker; "" for the root
    itself), takes int4 weights in `mode`."""
    in_stack = path.split(".")[0] == "model"  # the decoder layers; the predictor and heads lie beside `.model`
    return linear.in_features % GROUP == 0 and (mode == "int4" or (mode == "mixed" and in_stack))


def weight_bytes(module: nn.Module) -> int:
    """Bytes of a quantized layer's weight and scales (its buffers)."""
    return sum(b.numel() * b.element_size() for b in module.buffers())


QUANTIZED = QuantizedLinear


def measured_gain(stack: nn.Module, repeats: int = 3) -> float | None:
    """How much faster this CPU multiplies one row by `stack`'s down_proj weights in int8 than as loaded
    (median of interleaved sweeps over every layer's distinct weight, so they come from memory, as in a
    decode step), or None for a stack too small for its weights to leave the caches."""
    import statistics
    import time

    found = [m.down_proj for m in stack.modules() if isinstance(getattr(m, "down_proj", None), Linear)]
    if not found:
        return None
    shape = max({m.weight.shape for m in found}, key=lambda sh: sum(m.weight.numel() for m in found if m.weight.shape == sh))
    layers = [m for m in found if m.weight.shape == shape]  # the talker's layers (the predictor's are narrower in 1.7B)
    weights = [m.weight for m in layers]
    if sum(w.numel() * w.element_size() for w in weights) < 64 * 2**20 or weights[0].device.type != "cpu":
        return None
    packed = [quantize_weight(w) for w in weights]
    x = torch.randn(1, weights[0].shape[1]).to(weights[0].dtype)
    xb = x.to(torch.bfloat16)
    sweeps = {"float": lambda: [m(x) for m in layers],  # as loaded: through each matmul's plan
              "int8": lambda: [torch.ops.aten._weight_int8pack_mm(xb, q, s) for q, s in packed]}
    times = {name: [] for name in sweeps}
    with torch.no_grad():
        for round_ in range(repeats + 1):
            for name, sweep in sweeps.items():
                start = time.perf_counter()
                sweep()
                if round_:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
    return statistics.median(times["float"]) / statistics.median(times["int8"])
