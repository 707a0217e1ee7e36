"""float32 and bfloat16 matmuls through oneDNN with the weight packed once: batch-invariant rows without padding.

MKL's float32 GEMM, which F.linear calls on a CPU, runs a row through other kernels by the number of
rows in the call, and on some CPUs is slow for a few rows. F.linear in bfloat16 is oneDNN's already, but
hands it a plain weight, which it reorders into its blocked layout on every call. oneDNN's inner-product
primitive with its weight packed once for a BATCH_HINT-row batch (`torch.ops.mkldnn._reorder_linear_weight`,
what inductor's frozen graphs call) can give every row the same bits in every call without padding a lone
row, and run a few rows at once much faster; in bfloat16 it skips the reorder (the CPUs measured:
BENCHMARKS.md, "Batch invariance").

Whether it holds on a given CPU is still probed like every plan (planner/probe.py), and it is only
taken where it is timed faster (planner/timing.py). The packed copy lives beside the plain weight
(exact mode's plain matmuls, compiled graphs and the page's tools read the plain one): one more
copy of the weights that take it, so it is offered only where memory allows (planner/store.py).
"""

from __future__ import annotations

import torch

BATCH_HINT = 32  # the batch the weight is packed for; the rows it is checked to hold for (probe.PROBE_ROWS)
# Not tried above this: probing packs a passing copy of the weight (as much memory again, for a while), and
# the weights this large are vocabulary heads (Qwen3-Omni's 152k x 2048, 1.2 GB in float32).
MAX_BYTES = 256 * 2**20


def usable(weight: torch.Tensor) -> bool:
    """float32, or bfloat16 where oneDNN has bfloat16 kernels for this CPU, on a CPU with oneDNN, up to MAX_BYTES."""
    dtypes = (torch.float32, torch.bfloat16) if torch.ops.mkldnn._is_mkldnn_bf16_supported() else (torch.float32,)
    return (weight.device.type == "cpu" and weight.dtype in dtypes and torch.backends.mkldnn.is_available()
            and weight.numel() * weight.element_size() <= MAX_BYTES)


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] → oneDNN's blocked layout for BATCH_HINT rows (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), BATCH_HINT)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, out_features: int,
           chunk: int) -> torch.Tensor:
    """F.linear(x, weight, bias) through the packed weight, in calls of at most `chunk` rows."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 0:
        return x.new_zeros(*x.shape[:-1], out_features)
    blocks = [torch.ops.mkldnn._linear_pointwise(block, packed, bias, "none", [], "") for block in rows.split(chunk)]
    out = blocks[0] if len(blocks) == 1 else torch.cat(blocks)
    return out.view(*x.shape[:-1], out_features)
