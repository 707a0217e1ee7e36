"""Batch-invariant matmuls, the runtime: a `Linear` that applies its weight shape's `Plan`.

The engine batches the rows of many requests into one matmul, and a request must get the same floats
alone as beside others. A CPU GEMM picks its kernel by the number of rows in the call, and rows come
out with other last bits across kernels. A `Plan` cuts a call so that every block runs in one kernel:
each block has between pad_min and chunk rows (fewer are padded with zero rows, more are split), on
the plan's `Kernel`. Which plan holds for a weight shape is the CPU's; the planner (omni_core/planner/)
finds it once at load by probing the real kernel, and this module only applies it.

Exact mode (`load_pipeline(exact=True)`) and `batch_invariant=False` run every matmul as PLAIN: one
F.linear per call, as the official implementations call it, with nothing probed.

A prompt's prefill is compute, not a weight read, and its piece's length is the prompt's alone: inside
`prompt_pieces(sizes)` every Linear multiplies each piece's rows in one call on the fastest kernel it has (the
packed oneDNN weight, else F.linear), however many pieces share the call, not in the plan's blocks. A
piece's bits then depend on its own length, never on who else is prefilled beside it.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models import onednn


class Kernel(enum.Enum):
    """What runs a plan's blocks."""
    ATEN = "aten"  # F.linear
    SERIAL = "serial"  # F.linear on one thread: a small GEMM costs its call, and more threads wake the team
    ONEDNN = "onednn"  # through oneDNN with the weight packed once (onednn.py)


class Plan(NamedTuple):
    pad_min: int  # a block of fewer rows is padded with zero rows up to this
    chunk: int  # a call of more rows is split into blocks of at most this
    kernel: Kernel = Kernel.ATEN


SAFE = Plan(16, 32)  # the rule before plans: every row in float32's and bfloat16's 16-32 row kernel
PLAIN = Plan(1, 1 << 30)  # one F.linear per call whatever the rows: the official calls, not batch-invariant
ROWWISE = Plan(0, 0)  # no GEMM: each row's products summed on their own (for shapes where no GEMM
# run holds, e.g. a 1-output gate, whose matrix-vector kernel depends on the row count)
ONEDNN = Plan(1, onednn.BATCH_HINT, Kernel.ONEDNN)  # no padding, blocks of up to the rows it is packed for
WHOLE_ONEDNN = Plan(1, 1 << 30, Kernel.ONEDNN)  # the packed weight, one call whatever the rows (a prompt piece)
# In a compiled graph a weight smaller than this is multiplied by inductor's own loop (ROWWISE), not a GEMM: each
# row summed on its own whatever the rows, so the graph has no branch on the number of rows (a plan's blocks are
# one, a symbolic size splits the graph into a variant per block count: 10 for a re-prefill step of the tiny model
# on a CPU whose GEMM holds for 2-3 rows), and such a GEMM costs its call, not its arithmetic.
COMPILED_GEMM_MIN = 1 << 20
# The rows of each prompt piece in the call being run (`prompt_pieces`); None: the plans apply.
_PIECES: contextvars.ContextVar[tuple[int, ...] | None] = contextvars.ContextVar("prefill_pieces", default=None)


@contextlib.contextmanager
def prompt_pieces(sizes):
    """While it lasts, a Linear's call of sum(sizes) rows is the prompt pieces of these lengths, packed in
    order: each piece is multiplied in one call of its own (module docstring)."""
    token = _PIECES.set(tuple(int(n) for n in sizes))
    try:
        yield
    finally:
        _PIECES.reset(token)


def pieces_now() -> tuple[int, ...] | None:
    """The prompt pieces' lengths of the call being run (`prompt_pieces`); None: a decode step, or in a graph
    (dynamo cannot trace a ContextVar: asked first)."""
    return None if torch.compiler.is_compiling() else _PIECES.get()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           plan: Plan = SAFE, packed: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear with every row computed by the same kernel however many rows share the call
    (`packed`: the weight in oneDNN's layout, for a plan of that kernel), and however the rows lie in
    memory: MKL rounds a transposed batch otherwise than the same rows contiguous (a 1-row stream's
    [1, T, C] view of a [1, C, T] tensor against the copy that 3 streams' [3, T, C] reshape makes)."""
    x = x.contiguous()
    if plan.kernel is Kernel.ONEDNN:
        return onednn.linear(x, packed, bias, weight.shape[0], plan.chunk)
    if plan.kernel is Kernel.SERIAL:
        return on_one_thread(_blocks, x, weight, bias, plan)
    if plan != PLAIN and weight.numel() < COMPILED_GEMM_MIN and torch.compiler.is_compiling():
        plan = ROWWISE  # inductor's own loop: see COMPILED_GEMM_MIN
    return _blocks(x, weight, bias, plan)


def on_one_thread(fn, *args):
    """fn(*args) with the calling thread's kernels on one thread (a switch there and back; the OpenMP
    team stays)."""
    threads = torch.get_num_threads()
    if threads == 1:
        return fn(*args)
    torch.set_num_threads(1)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(threads)


def _blocks(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, plan: Plan) -> torch.Tensor:
    """F.linear in blocks of pad_min..chunk rows (zero rows pad a short one), or ROWWISE."""
    if plan == ROWWISE:
        return _rowwise(x, weight, bias)
    rows, K = x.numel() // x.shape[-1], x.shape[-1]
    if plan.pad_min <= rows <= plan.chunk or rows == 0:
        return F.linear(x, weight, bias)
    blocks = []
    for block in x.reshape(rows, K).split(plan.chunk):
        n = block.shape[0]
        padded = F.pad(block, (0, 0, 0, plan.pad_min - n)) if n < plan.pad_min else block  # zero rows after
        blocks.append(F.linear(padded, weight, bias)[:n])
    out = blocks[0] if len(blocks) == 1 else torch.cat(blocks)
    return out.view(*x.shape[:-1], weight.shape[0])


def _rowwise(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] @ weight.T [K, N] as one reduction per row, whatever the rows. Half-precision products are
    summed in float32 and rounded once, as a GEMM accumulates (products rounded to bfloat16 first moved a tiny
    MoE router's scores 0.5 from the official ones)."""
    wide = torch.promote_types(x.dtype, torch.float32)  # float32 for half precision, else the dtype's own
    out = (x.unsqueeze(-2).to(wide) * weight.to(wide)).sum(-1)  # [..., N, K] -> [..., N]
    out = out if bias is None else out + bias.to(wide)
    return out.to(x.dtype)


class Linear(nn.Linear):
    """nn.Linear through `linear`, with the plan chosen for its shape at load (SAFE until then), and
    the weight packed for oneDNN where that plan needs it (`set_plan`)."""

    plan: Plan = SAFE
    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sizes = pieces_now()  # (graphs are decode steps, never prefills)
        if sizes is None or self.plan == PLAIN:
            return linear(x, self.weight, self.bias, self.plan, self.packed)
        return self._by_piece(x, sizes)

    def _by_piece(self, x: torch.Tensor, sizes: tuple[int, ...]) -> torch.Tensor:
        """x [..., ΣT, K] the packed pieces' rows → [..., ΣT, N], each piece's rows one call (`prompt_pieces`)."""
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] != sum(sizes):
            raise ValueError(f"a prefill call of {rows.shape[0]} rows for pieces of {list(sizes)} positions")
        whole = WHOLE_ONEDNN if self.packed is not None else PLAIN  # a piece in one call, whatever its rows
        out = [linear(piece, self.weight, self.bias, whole, self.packed) for piece in rows.split(sizes)]
        return (out[0] if len(out) == 1 else torch.cat(out)).view(*x.shape[:-1], self.out_features)

    def set_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.packed = onednn.pack(self.weight) if plan.kernel is Kernel.ONEDNN else None

    def __getstate__(self):  # copy.deepcopy, pickling: a packed weight is opaque, so it is packed again
        state = super().__getstate__()  # (a copy's attributes are the original's: compiled guards check them)
        return {**state, "packed": None} if "packed" in state else state

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        # (A compiled step's guards pickle a module with what they do not read left out: no plan, no weight.)
        if isinstance(self.plan, Plan) and self.plan.kernel is Kernel.ONEDNN and isinstance(self.weight, torch.Tensor):
            self.packed = onednn.pack(self.weight)


def use_plan(modules, plan: Plan) -> None:
    """Give every matmul in `modules` one plan (PLAIN: a pipeline without batch invariance): each
    Linear, and each module with `plan_weights()` (the MoE's router and stacked experts, which call
    `linear` with `plans[i]` for their i-th weight)."""
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.set_plan(plan)
            elif hasattr(module, "plan_weights"):
                module.plans = [plan] * len(module.plan_weights())
