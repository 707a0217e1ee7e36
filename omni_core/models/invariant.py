"""Batch-invariant matmuls: a row gets the same bits alone as in any batch, with the fastest kernels that hold.

The engine batches the rows of many requests into one matmul, and a request must get the
same floats alone as beside others. CPU GEMMs pick their kernel by the number of rows M,
and rows come out with other last bits across kernels. Which row counts share a kernel differs by CPU,
dtype, shape and thread count (the classes measured on this project's CPUs: BENCHMARKS.md, "Batch
invariance: which rows share a kernel").

A `Plan(pad_min, chunk)` cuts a call so that every block has between pad_min and chunk rows
(fewer rows are padded with zero rows, more are split), so every row runs in one class.
The classes differ by shape and CPU (tiny widths have others), so they are mapped per weight
shape once at load (`plan_linears`) by probing the real kernel with random rows; the run of at
least MIN_RUN row counts with the smallest first count is taken, then checked at every position.
A weight of TIMED_BYTES or more is then timed against, for float32 on a CPU, ONEDNN (the weight packed
once for oneDNN: onednn.py), where it holds; `fastest` takes the quickest for a lone row, or one within
LONE_ROW_SLACK of it that is quicker for 8.
A smaller weight on a CPU is also mapped and checked on one thread, and that plan (kernel "serial":
its calls run on one thread) is timed against the run's: a small GEMM costs its call, not its
arithmetic, and on more threads each call wakes the OpenMP team, while MKL's one-thread row classes
can be longer ones. What each kind of weight ends up with:

  float32, large  the run's plan or ONEDNN, whichever is timed faster (MKL's short runs pad a lone
                  row into a few-row GEMM, which some CPUs make expensive: docs/benchmarks-history.md (l))
  float32, small  the run's plan, or the same on one thread ("serial", which holds whatever the
                  engine's threads), whichever is timed faster
  bfloat16        pad 1 / chunk 32: no padding at all where 1-32 rows are one class; else the run, a lone
                  row padded into it (where the step reads its weights from memory, rows beside a lone
                  one cost almost nothing: docs/benchmarks-history.md (y))
  otherwise       pad 16 / chunk 32, the safe rule (every row in the 16-32 class), if it holds,
                  or ROWWISE: no GEMM, each row's products summed alone (a 1-output gate)

so every row of any batch gets its solo bits. A lone row's last bits may differ from the 1-row call the
official implementations make (where the CPU's 1-row kernel rounds otherwise than its run's): the
official bits are `load_pipeline(exact=True)`'s, which runs one request at a time on PLAIN matmuls.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from omni_core.models import onednn


class Plan(NamedTuple):
    pad_min: int  # a block of fewer rows is padded with zero rows up to this
    chunk: int  # a call of more rows is split into blocks of at most this
    kernel: str = "aten"  # "aten": F.linear; "onednn": the weight packed for oneDNN (onednn.py); "serial": on one thread


SAFE = Plan(16, 32)  # the rule before plans: every row in float32's and bfloat16's 16-32 row kernel
PLAIN = Plan(1, 1 << 30)  # one F.linear per call whatever the rows: the fastest, not batch-invariant
ROWWISE = Plan(0, 0)  # no GEMM: each row's products summed on their own (for shapes where no GEMM
# run holds, e.g. a 1-output gate, whose matrix-vector kernel depends on the row count)
ONEDNN = Plan(1, onednn.BATCH_HINT, "onednn")  # float32 through oneDNN, no padding, blocks of up to 32 rows
# The kernels a weight's plan may use (`choose`): compiled graphs read F.linear only (inductor packs its own
# weights and cannot trace a thread switch); stacked weights (the MoE's experts) and a machine without room
# for packed copies take no oneDNN.
ATEN_ONLY, NO_PACKING, ALL_KERNELS = "aten", "aten+serial", "aten+serial+onednn"
PROBE_ROWS = 32  # row counts 1..PROBE_ROWS are mapped and checked
PROBE_OUTPUTS, PROBE_ROWS_MAX = 2**20, 2**14  # a half-precision weight's plan is checked on this many outputs
# (of at most this many rows: `holds`), where rare last bits show
MIN_RUN = 8  # a plan's run of row counts at least this long, where the CPU has one (`candidates`)
LONE_ROW_SLACK = 1.5  # a plan's 1-row call may be at most this much slower than the fastest one's (`fastest`)
TIMED_BYTES = 4 * 2**20  # weights this large choose their plan by timing: the kernel, not the calls, costs there
RULE = 11  # the way plans are chosen; a change of it makes every machine choose its plans again (loading/plans.py)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           plan: Plan = SAFE, packed: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear with every row computed by the same kernel however many rows share the call
    (`packed`: the weight in oneDNN's layout, for a plan of that kernel), and however the rows lie in memory:
    MKL rounds a transposed batch otherwise than the same rows contiguous (measured: a 1-row stream's
    [1, T, C] view of a [1, C, T] tensor against the copy that 3 streams' [3, T, C] reshape makes)."""
    x = x.contiguous()
    if plan.kernel == "onednn":
        return onednn.linear(x, packed, bias, weight.shape[0], plan.chunk)
    if plan.kernel == "serial":
        return on_one_thread(_blocks, x, weight, bias, plan)
    return _blocks(x, weight, bias, plan)


def on_one_thread(fn, *args):
    """fn(*args) with the calling thread's kernels on one thread (a switch there and back: ~0.5 µs, the
    OpenMP team stays)."""
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


def holds(plan: Plan, weight: torch.Tensor, bias: torch.Tensor | None = None, seed: int = 0,
          packed: torch.Tensor | None = None) -> bool:
    """Whether every row of every call of 1..PROBE_ROWS rows, at offsets 0 and 3 of random data, equals
    that row's own 1-row call under `plan`, bit for bit; and, for a narrow half-precision weight, so do
    PROBE_OUTPUTS outputs' rows (at most PROBE_ROWS_MAX) in calls of 2..PROBE_ROWS rows in turn: a bfloat16
    output hides most of two kernels' differences in summing order, so they show in rare last bits only,
    which 35 rows miss (BENCHMARKS.md, "Batch invariance: which rows share a kernel")."""
    if plan.kernel == "serial" and torch.get_num_threads() > 1:  # its calls on one thread: switch once
        return on_one_thread(holds, plan, weight, bias, seed, packed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    rows = PROBE_ROWS + 3
    if weight.element_size() < 4:
        rows = max(rows, min(PROBE_OUTPUTS // weight.shape[0], PROBE_ROWS_MAX))
    X = torch.randn(rows, weight.shape[1], generator=gen).to(weight.device, weight.dtype)
    if plan.kernel == "onednn" and packed is None:
        packed = onednn.pack(weight)
    with torch.no_grad():
        solo = torch.cat([linear(X[r:r + 1], weight, bias, plan, packed) for r in range(X.shape[0])])
        for M in range(2, PROBE_ROWS + 1):
            for offset in (0, 3):
                if not torch.equal(linear(X[offset:offset + M], weight, bias, plan, packed), solo[offset:offset + M]):
                    return False
        at, M = PROBE_ROWS + 3, 2
        while at < rows:
            if not torch.equal(linear(X[at:at + M], weight, bias, plan, packed), solo[at:at + M]):
                return False
            at, M = at + M, 2 + (M - 1) % (PROBE_ROWS - 1)  # 2, 3, .., PROBE_ROWS, 2, ..
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
    (at 1 thread; at 2 threads 4-32 fails `holds` there, and 2-3 is taken).
    A run from 1 row is also tried from 2: `runs` compares a call's first row only, and where a lone row's
    kernel rounds other rows otherwise (bfloat16 at K = 2048 and 3072 on some AMD EPYCs), 2-32 rows still
    hold, and a lone row padded to 2 costs about a 1-row call where 16 rows cost up to 1.5x (benchmark docs)."""
    long = [Plan(first, last) for first, last in found if last - first + 1 >= MIN_RUN]
    long += [Plan(2, last) for first, last in found if first == 1 and last - 1 >= MIN_RUN]
    short = [Plan(first, last) for first, last in found if 1 < last - first + 1 < MIN_RUN]
    return sorted(long) + sorted(short) + [SAFE]


def choose(weight: torch.Tensor, bias: torch.Tensor | None, chosen: dict, kernels: str = ALL_KERNELS) -> Plan:
    """The plan for this weight's shape and dtype (cached in `chosen`): the first of `candidates` that
    passes `holds` (else ROWWISE). A weight of TIMED_BYTES or more, where the kernels' speed decides, is
    timed against ONEDNN (float32 on a CPU) where that holds; a smaller one on a CPU against its
    one-thread plan ("serial"): `fastest` of them. kernels: ATEN_ONLY, NO_PACKING or ALL_KERNELS."""
    key = (tuple(weight.shape), weight.dtype, weight.device.type, bias is not None, kernels)
    if key not in chosen:
        chosen[key] = _choose(weight, bias, kernels)
    return chosen[key]


def timed(weight: torch.Tensor) -> bool:
    """A weight of TIMED_BYTES or more: its plan is chosen by timing (`_choose`)."""
    return weight.numel() * weight.element_size() >= TIMED_BYTES


def first_holding(weight: torch.Tensor, bias: torch.Tensor | None) -> Plan:
    """The first of `candidates` that passes `holds` on the calling thread's kernels, else ROWWISE."""
    return next((p for p in candidates(runs(weight, bias)) if holds(p, weight, bias)), ROWWISE)


def _choose(weight: torch.Tensor, bias: torch.Tensor | None, kernels: str) -> Plan:
    large = timed(weight)
    others, packed = [], None
    if not large and "serial" in kernels and weight.device.type == "cpu":
        serial = on_one_thread(first_holding, weight, bias)
        if serial != ROWWISE:
            serial = serial._replace(kernel="serial")
            others.append(serial)
        if torch.get_num_threads() == 1:  # the same calls; and a serial plan holds at any thread count
            return serial
    plan = first_holding(weight, bias)
    if plan == ROWWISE:
        return plan
    if large:
        packed = onednn.pack(weight) if "onednn" in kernels and onednn.usable(weight) else None
        if packed is not None and holds(ONEDNN, weight, bias, packed=packed):
            others.append(ONEDNN)
    if not others:
        return plan
    plans = [plan, *others]
    return fastest(plans, timings(plans, weight, bias, packed=packed, evict=large, repeats=7 if large else 21))


def fastest(plans: list[Plan], times: dict[Plan, tuple[float, float]]) -> Plan:
    """A lone request first: of the plans whose 1-row call is within LONE_ROW_SLACK of the fastest, the one
    fastest for 8 rows (ties: the earlier). times: {plan: (seconds for 1 row, for 8 rows)}.

    Measured (ms, 1 row / 8 rows, a 4096x1024 float32 weight read from memory, `timings`): this EPYC at 2
    threads, blocks of 2-3 rows 3.6 / 8.9, a 1-row call per row 1.6 / 9.9, ONEDNN 2.1 / 2.5 → ONEDNN (in the engine a lone
    Qwen3-TTS 0.6B request ran as fast under ONEDNN as with a call per row, 8 at once 1.6x faster); the Xeon's
    2-15 blocks cost ~1.05x a 1-row call, so they stay there unless ONEDNN is faster."""
    lone = min(times[p][0] for p in plans)
    return min((p for p in plans if times[p][0] <= LONE_ROW_SLACK * lone), key=lambda p: times[p][1])


def timings(plans: list[Plan], weight: torch.Tensor, bias: torch.Tensor | None = None,
            repeats: int = 7, packed: torch.Tensor | None = None, evict: bool = True) -> dict[Plan, tuple[float, float]]:
    """{plan: (median seconds of a 1-row call, of an 8-row call)}, the plans interleaved in each round.
    evict: each call timed with the weight out of the CPU's caches (as a step of a model larger than the
    cache meets it: a weight timed hot from the cache ran a 1-row GEMV 1.3-1.5x faster than oneDNN, in the
    engine the two gave a lone Qwen3-TTS request the same frames/s); a small model's weights stay cached."""
    x = torch.randn(8, weight.shape[1], device=weight.device).to(weight.dtype)
    if packed is None and any(p.kernel == "onednn" for p in plans):
        packed = onednn.pack(weight)
    evict = torch.empty(cache_bytes() // 4, dtype=torch.float32) if evict and weight.device.type == "cpu" else None
    times: dict[tuple, list[float]] = {(p, n): [] for p in plans for n in (1, 8)}
    with torch.no_grad():
        for round_ in range(repeats + 1):  # the first round warms up
            for p in plans:
                for n in (1, 8):
                    if evict is not None:
                        evict.fill_(round_)  # writes twice the last-level cache: the weight is read from memory
                    if weight.is_cuda:
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    linear(x[:n], weight, bias, p, packed)
                    if weight.is_cuda:
                        torch.cuda.synchronize()
                    if round_:
                        times[p, n].append(time.perf_counter() - start)
    return {p: (statistics.median(times[p, 1]), statistics.median(times[p, 8])) for p in plans}


def cache_bytes() -> int:
    """Twice the CPU's last-level cache (Linux's sysfs), or 128 MB where it cannot be read."""
    try:
        size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        return 2 * int(size.rstrip("K")) * 1024
    except (OSError, ValueError):
        return 128 * 2**20


class Linear(nn.Linear):
    """nn.Linear through `linear`, with the plan chosen for its shape at load (SAFE until then), and
    the weight packed for oneDNN where that plan needs it (`set_plan`)."""

    plan: Plan = SAFE
    packed: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.plan, self.packed)

    def set_plan(self, plan: Plan) -> None:
        self.plan = plan
        self.packed = onednn.pack(self.weight) if plan.kernel == "onednn" else None

    def __getstate__(self):  # copy.deepcopy, pickling: a packed weight is opaque, so it is packed again
        return {**super().__getstate__(), "packed": None}

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        # (A compiled step's guards pickle a module with what they do not read left out: no plan, no weight.)
        if isinstance(self.plan, Plan) and self.plan.kernel == "onednn" and isinstance(self.weight, torch.Tensor):
            self.packed = onednn.pack(self.weight)


def use_plan(modules, plan: Plan) -> None:
    """Give every matmul in `modules` one plan (PLAIN: a pipeline without batch invariance)."""
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.set_plan(plan)
            elif hasattr(module, "plan_weights"):
                module.plans = [plan] * len(module.plan_weights())


def plan_linears(modules, chosen: dict | None = None, kernels: str = ALL_KERNELS) -> dict:
    """Choose the plan of every batch-invariant matmul in `modules` (after their weights are loaded):
    each Linear, and each module with `plan_weights()` (the MoE router and experts, whose stacked
    weights are never packed), probing each distinct shape once.
    kernels: what a plan may use besides F.linear (ATEN_ONLY in compiled graphs; NO_PACKING where no
    packed copies fit). Returns the table {(shape, dtype, device, bias?, kernels): Plan}."""
    chosen = {} if chosen is None else chosen
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.set_plan(choose(module.weight, module.bias, chosen, kernels))
            elif hasattr(module, "plan_weights"):
                stacked = NO_PACKING if "serial" in kernels else ATEN_ONLY
                module.plans = [choose(w, None, chosen, stacked) for w in module.plan_weights()]
    return chosen
