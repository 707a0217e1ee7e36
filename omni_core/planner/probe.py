"""Which plans hold for a weight on this CPU, found by running its real kernel on random rows.

`runs` groups the row counts 1..PROBE_ROWS by the kernel that computes them; `candidates` turns
those runs into plans to try, cheapest first; `holds` checks a plan at every row count and two
offsets, bit for bit against each row's lone call; `widened` extends the plan kept (choose.py) from
PROBE_ROWS to WIDE_ROWS where every count between holds too. The answer depends on the shape, the dtype and
the machine's kernels, never on the weights' values (so it is kept per machine: store.py).
One weight's probes share its random rows and the calls they repeat (`Calls`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from omni_core.models import onednn
from omni_core.models.invariant import ROWWISE, SAFE, Kernel, Plan, linear, on_one_thread

PROBE_ROWS = 32  # row counts 1..PROBE_ROWS are mapped and checked
PROBE_OUTPUTS, PROBE_ROWS_MAX = 2**20, 2**14  # a half-precision weight's plan is checked on this many outputs
# (of at most this many rows: `holds`), where rare last bits show
NARROW = PROBE_OUTPUTS // PROBE_ROWS_MAX  # a half-precision weight of fewer outputs is not checked (`too_narrow`)
MIN_RUN = 8  # a plan's run of row counts at least this long, where the CPU has one (`candidates`)
WIDE_ROWS = 64  # a plan whose run reaches PROBE_ROWS is checked on up to this many rows (`widened`)
WIDE_NUMEL = 2**25  # ... for weights of at most this many elements (a vocabulary head takes a few rows a call)


class Calls:
    """One weight's probe rows X (random, from `seed`: enough for every probe) and the GEMM calls on them that
    the probes repeat, each made once per thread count: every row's 1-row call (a plan's `solo`, the same for
    every plan of its padding) and the calls of 1..PROBE_ROWS rows from row 0 (`runs`' calls, which are each
    plan's offset-0 calls where it makes one plain call). A vocabulary head's call costs about a second on a CPU
    without bfloat16 instructions, whatever its rows: a third of its probe was such repeats.
    Each kept result is the very call `linear` makes (the same rows of the same tensor, the same kernel and
    threads), so a probe's answers are the ones it gives without them. They are kept while the weight is probed
    (`choose` makes one Calls a weight): a vocabulary head's 528 rows of runs' outputs, as `runs` held them before."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        rows = max(WIDE_ROWS + 3, half_rows(weight))  # the most any probe reads (holds, widened)
        self.X = torch.randn(rows, weight.shape[1], generator=gen).to(weight.device, weight.dtype)
        self.weight, self.bias, self.kept = weight, bias, {}

    def linear(self, plan: Plan, start: int, n: int, packed: torch.Tensor | None = None) -> torch.Tensor:
        """invariant.linear(X[start:start + n]) under `plan`, bit for bit; a repeated call read from `kept`."""
        x = self.X[start:start + n]
        repeated = n == 1 or (start == 0 and n <= PROBE_ROWS)
        if plan.kernel is Kernel.ONEDNN or plan == ROWWISE or n > plan.chunk or not repeated:
            return linear(x, self.weight, self.bias, plan, packed)
        if plan.kernel is Kernel.SERIAL and torch.get_num_threads() > 1:
            return on_one_thread(self.linear, plan, start, n)
        pad = max(plan.pad_min, n)  # invariant._blocks: one call, zero rows after a short one
        key = (torch.get_num_threads(), start, n, pad)
        if key not in self.kept:
            self.kept[key] = F.linear(F.pad(x, (0, 0, 0, pad - n)) if pad > n else x, self.weight, self.bias)[:n]
        return self.kept[key]


def half_rows(weight: torch.Tensor) -> int:
    """The rows a half-precision weight is checked on (PROBE_OUTPUTS outputs, at most PROBE_ROWS_MAX); 0 else."""
    return min(PROBE_OUTPUTS // weight.shape[0], PROBE_ROWS_MAX) if weight.element_size() < 4 else 0


def too_narrow(weight: torch.Tensor) -> bool:
    """A half-precision weight of fewer than NARROW outputs: PROBE_ROWS_MAX rows hold too few outputs to check
    (a 4-output one, 65,536), and plans passed that were wrong. On a Zen 4, a tiny 4x48 bfloat16 weight's
    1-64-row plan passed with some weights, yet 11 in 524,288 outputs of its 32-row calls differ from their rows'
    lone calls. Such a weight is summed row by row (ROWWISE: always holds, and costs little at this width)."""
    return weight.element_size() < 4 and weight.shape[0] < NARROW


def holds(plan: Plan, weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0,
          packed: torch.Tensor | None = None, counts: range = range(2, PROBE_ROWS + 1),
          calls: Calls | None = None) -> bool:
    """Whether every row of every call of `counts` rows, at offsets 0 and 3 of random data, equals
    that row's own 1-row call under `plan`, bit for bit; and, for a narrow half-precision weight, so do
    PROBE_OUTPUTS outputs' rows (at most PROBE_ROWS_MAX) in calls of `counts` rows in turn: a bfloat16
    output hides most of two kernels' differences in summing order, so they show in rare last bits only,
    which 35 rows miss (BENCHMARKS.md, "Batch invariance"). calls: the weight's shared rows and calls."""
    if plan.kernel is Kernel.SERIAL and torch.get_num_threads() > 1:  # its calls on one thread: switch once
        return on_one_thread(holds, plan, weight, bias, seed, packed, counts, calls)
    calls = calls or Calls(weight, bias, seed)
    rows = max(counts[-1] + 3, half_rows(weight))
    if plan.kernel is Kernel.ONEDNN and packed is None:
        packed = onednn.pack(weight)

    def call(start: int, n: int) -> torch.Tensor:
        return calls.linear(plan, start, n, packed)

    solo: list[torch.Tensor] = []  # each row's own 1-row call, made when a check first reads it: a plan that fails
    # does so within its first rows, and is spared the rest (a narrow half-precision weight's 16,384)

    def alone(start: int, n: int) -> torch.Tensor:
        solo.extend(call(r, 1) for r in range(len(solo), start + n))
        return torch.cat(solo[start:start + n])

    with torch.no_grad():
        for M in counts:
            for offset in (0, 3):
                if not torch.equal(call(offset, M), alone(offset, M)):
                    return False
        at, turn = counts[-1] + 3, 0
        while at < rows:
            M = min(counts[turn % len(counts)], rows - at)  # counts in turn, from the first; the last cut at rows
            if not torch.equal(call(at, M), alone(at, M)):
                return False
            at, turn = at + M, turn + 1
    return True


def runs(weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0,
         calls: Calls | None = None) -> list[tuple[int, int]]:
    """Row counts 1..PROBE_ROWS grouped into runs that share a kernel: M joins the run that starts at
    s when the first s rows of an M-row call equal an s-row call's, bit for bit. [(first, last), ...]"""
    calls = calls or Calls(weight, bias, seed)
    with torch.no_grad():
        outs = [calls.linear(Plan(M, M), 0, M) for M in range(1, PROBE_ROWS + 1)]  # one plain call each
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
    (more than one count); then SAFE. A short run would cut every batch into many GEMMs, each reading
    all the weights, to spare a lone row a few rows of padding.
    A run from 1 row is also tried from 2: `runs` compares a call's first row only, and where a lone
    row's kernel rounds the other rows otherwise, 2..last rows may still hold, and a lone row padded to
    2 costs about a 1-row call (the CPUs where that happens: BENCHMARKS.md, "Batch invariance")."""
    long = [Plan(first, last) for first, last in found if last - first + 1 >= MIN_RUN]
    long += [Plan(2, last) for first, last in found if first == 1 and last - 1 >= MIN_RUN]
    short = [Plan(first, last) for first, last in found if 1 < last - first + 1 < MIN_RUN]
    return sorted(long) + sorted(short) + [SAFE]


def first_holding(weight: torch.Tensor, bias: torch.Tensor | None, calls: Calls | None = None) -> Plan:
    """The first of `candidates` that passes `holds` on the calling thread's kernels, else ROWWISE."""
    calls = calls or Calls(weight, bias)
    return next((p for p in candidates(runs(weight, bias, calls=calls)) if holds(p, weight, bias, calls=calls)),
                ROWWISE)


def widened(plan: Plan, weight: torch.Tensor, bias: torch.Tensor | None, calls: Calls | None = None) -> Plan:
    """`plan` cutting calls at WIDE_ROWS instead of PROBE_ROWS where every call of PROBE_ROWS+1..WIDE_ROWS
    rows holds too (`holds`, on the plan's own threads); else `plan`. A GEMM of many rows runs nearer the CPU's
    peak than the same rows cut into blocks of 32, each reading all the weights: a prompt's prefill, a batch of
    re-prefill rows. Called on the plan the planner keeps (choose.py), so no other candidate pays for the check."""
    if plan.chunk != PROBE_ROWS or plan.kernel not in (Kernel.ATEN, Kernel.SERIAL) or weight.numel() > WIDE_NUMEL:
        return plan
    wide = plan._replace(chunk=WIDE_ROWS)
    return wide if holds(wide, weight, bias, counts=range(PROBE_ROWS + 1, WIDE_ROWS + 1), calls=calls) else plan
