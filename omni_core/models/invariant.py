"""Batch-invariant matmuls: a row gets the same bits alone as in any batch, at a lone row's speed.

The engine batches the rows of many requests into one matmul, and a request must get the
same floats alone as beside others. CPU GEMMs pick their kernel by the number of rows M,
and rows come out with other last bits across kernels. Measured with torch 2.13 on this
project's CPUs (BENCHMARKS.md, "Batch invariance"), every M in 1..32 at every position:

  Intel Xeon   float32 (MKL sgemm)  1 | 2-15 | 16-128: three classes, the same at 1 and 2 threads
               bfloat16 (oneDNN)    1-32 one class, except K = 6144, where 1 row differs from >= 2
  AMD EPYC     float32              1 | 2-3 | 4-32, at tiny and real widths; at 2 threads a row's
                                    bits in a 4-15 row call also depend on its position
               bfloat16             1-32 one class, K = 6144 too

A `Plan(pad_min, chunk)` cuts a call so that every block has between pad_min and chunk rows
(fewer rows are padded with zero rows, more are split), so every row runs in one class.
The classes differ by shape and CPU (tiny widths have others), so they are mapped per weight
shape once at load (`plan_linears`) by probing the real kernel with random rows; the run of at
least MIN_RUN row counts with the smallest first count is taken, then checked at every position:

  Xeon float32   pad 2 / chunk 15   a lone row pays a 2-row GEMM (~1.05x a 1-row call)
  EPYC float32   pad 4 / chunk 32   at 1 thread (not 2-3: batches cut into blocks of 3 rows);
                 pad 2 / chunk 3    at 2 threads, where only 16-32 of the long run holds
  bfloat16       pad 1 / chunk 32   no padding at all; pad 2 / chunk 32 at K = 6144 on the Xeon
  otherwise      pad 16 / chunk 32  the safe rule (every row in the 16-32 class), if it holds,
                 or ROWWISE: no GEMM, each row's products summed alone (a 1-output gate)

so a lone request runs at a lone row's speed and its rows still equal any batched run.
A request's own prefill is never batched with others' rows: it runs with plain F.linear
(`exact()`), the kernels the official implementations use, so a lone bfloat16 request
gives their exact codes.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class Plan(NamedTuple):
    pad_min: int  # a block of fewer rows is padded with zero rows up to this
    chunk: int  # a call of more rows is split into blocks of at most this


SAFE = Plan(16, 32)  # the rule before plans: every row in float32's and bfloat16's 16-32 row kernel
PLAIN = Plan(1, 1 << 30)  # one F.linear per call whatever the rows: the fastest, not batch-invariant
ROWWISE = Plan(0, 0)  # no GEMM: each row's products summed on their own (for shapes where no GEMM
# run holds, e.g. a 1-output gate, whose matrix-vector kernel depends on the row count)
PROBE_ROWS = 32  # row counts 1..PROBE_ROWS are mapped and checked
MIN_RUN = 8  # a plan's run of row counts at least this long, where the CPU has one (`candidates`)
_exact = False  # inside `exact()`: plain F.linear (a global, not a thread-local: compiled regions read it)


@contextlib.contextmanager
def exact():
    """Matmuls inside run as plain F.linear, with the official implementations' kernels: for work that
    only ever holds one request's rows (its prompt's prefill, its voice's encoding), which no
    neighbour can change. The engine's one thread sets it around a request's own prefill."""
    global _exact
    previous, _exact = _exact, True
    try:
        yield
    finally:
        _exact = previous


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           plan: Plan = SAFE) -> torch.Tensor:
    """F.linear with every row computed by the same kernel however many rows share the call."""
    if _exact:
        return F.linear(x, weight, bias)
    if plan == ROWWISE:
        out = (x.unsqueeze(-2) * weight).sum(-1)  # [..., N]: a reduction per row, whatever the rows
        return out if bias is None else out + bias
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


def holds(plan: Plan, weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0) -> bool:
    """Whether every row of every call of 1..PROBE_ROWS rows, at offsets 0 and 3 of random data, equals
    that row's own 1-row call under `plan`, bit for bit."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    X = torch.randn(PROBE_ROWS + 3, weight.shape[1], generator=gen).to(weight.device, weight.dtype)
    with torch.no_grad():
        solo = torch.cat([linear(X[r:r + 1], weight, bias, plan) for r in range(X.shape[0])])
        for M in range(2, PROBE_ROWS + 1):
            for offset in (0, 3):
                if not torch.equal(linear(X[offset:offset + M], weight, bias, plan), solo[offset:offset + M]):
                    return False
    return True


def runs(weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0) -> list[tuple[int, int]]:
    """Row counts 1..PROBE_ROWS grouped into runs that share a kernel: M joins the run that starts at
    s when the first s rows of an M-row call equal an s-row call's, bit for bit. [(first, last), ...]"""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    X = torch.randn(PROBE_ROWS, weight.shape[1], generator=gen).to(weight.device, weight.dtype)
    with torch.no_grad():
        outs = [F.linear(X[:M], weight, bias) for M in range(1, PROBE_ROWS + 1)]
    found = [[1, 1]]
    for M in range(2, PROBE_ROWS + 1):
        start = found[-1][0]
        if torch.equal(outs[M - 1][:start], outs[start - 1]):
            found[-1][1] = M
        else:
            found.append([M, M])
    return [tuple(r) for r in found]


def candidates(found: list[tuple[int, int]]) -> list[Plan]:
    """The plans to try, cheapest first, from the CPU's kernel runs (`runs`): a run at least MIN_RUN
    counts long, smallest first count first (a lone row pays for that many rows); then shorter runs
    (more than one count); then SAFE. A short run would cut every batch into many GEMMs: this AMD EPYC
    runs float32 as 1 | 2-3 | 4-32 rows, and a plan of 2-3 rows cuts a 64-row re-prefill call into 22
    GEMMs (each one reading all the weights) where 4-32 takes 2, for a lone row padded to 4 instead of 2
    (at 1 thread; at 2 threads 4-32 fails `holds` there, and 2-3 is taken)."""
    long = [Plan(first, last) for first, last in found if last - first + 1 >= MIN_RUN]
    short = [Plan(first, last) for first, last in found if 1 < last - first + 1 < MIN_RUN]
    return sorted(long) + sorted(short) + [SAFE]


def choose(weight: torch.Tensor, bias: torch.Tensor | None, chosen: dict) -> Plan:
    """The cheapest plan that holds for this weight's shape and dtype (cached in `chosen`): the first of
    `candidates` that passes `holds`; else ROWWISE. (One call per row would spare a tiny model's lone
    row its padding, but a compiled frame of B rows would hold B times the kernels: one inductor C++
    build ran for over 8 minutes.)"""
    key = (tuple(weight.shape), weight.dtype, weight.device.type, bias is not None)
    if key not in chosen:
        chosen[key] = next((p for p in candidates(runs(weight, bias)) if holds(p, weight, bias)), ROWWISE)
    return chosen[key]


class Linear(nn.Linear):
    """nn.Linear through `linear`, with the plan chosen for its shape at load (SAFE until then)."""

    plan: Plan = SAFE

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.plan)


def use_plan(modules, plan: Plan) -> None:
    """Give every matmul in `modules` one plan (PLAIN: a pipeline without batch invariance)."""
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.plan = plan
            elif hasattr(module, "plan_weights"):
                module.plans = [plan] * len(module.plan_weights())


def plan_linears(modules, chosen: dict | None = None) -> dict:
    """Choose the plan of every batch-invariant matmul in `modules` (after their weights are loaded):
    each Linear, and each module with `plan_weights()` (the MoE router and experts), probing each
    distinct shape once. Returns the table {(shape, dtype, device, bias?): Plan}."""
    chosen = {} if chosen is None else chosen
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.plan = choose(module.weight, module.bias, chosen)
            elif hasattr(module, "plan_weights"):
                module.plans = [choose(w, None, chosen) for w in module.plan_weights()]
    return chosen
