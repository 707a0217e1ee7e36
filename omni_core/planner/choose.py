"""The plan of each weight shape: the cheapest plan that holds (probe.py), timed against the other
kernels where speed decides (timing.py).

What each kind of weight ends up with, and why:

  large           the run's plan or ONEDNN, whichever is timed faster. float32: MKL pads a lone row into a
                  few-row GEMM, which some CPUs make expensive; oneDNN needs no padding. bfloat16 (where
                  oneDNN has its kernels): F.linear reorders the plain weight on every call, the packed
                  copy is read as it lies
  small, CPU      the run's plan, or the same on one thread (Kernel.SERIAL, which holds whatever the
                  engine's threads), whichever is timed faster: a small GEMM costs its call, not its
                  arithmetic, and on more threads each call wakes the OpenMP team
  bfloat16, small pad 1 / chunk 32 where 1-32 rows are one kernel; else the run, a lone row padded into it
                  (where a step reads its weights from memory, rows beside a lone one cost almost nothing)
  otherwise       SAFE (every row in the 16-32 row kernel) if it holds, or ROWWISE (a 1-output gate)
  narrow, half    ROWWISE unprobed: under 64 outputs the check cannot see enough outputs (probe.too_narrow)

A plan whose rows 2-32 hold cuts calls at 64 rows instead of 32 where rows 33-64 hold too (probe.widened:
a prompt's prefill and a batch of re-prefill rows then read the weights half as often), so every row of any
batch gets its solo bits. A lone row's last bits may differ from the 1-row call
the official implementations make: exact mode runs PLAIN for those. The CPUs measured, and what each
choice costs there: BENCHMARKS.md, "Batch invariance: which rows share a kernel".
"""

from __future__ import annotations

import torch

from omni_core.models import onednn
from omni_core.models.invariant import ONEDNN, ROWWISE, Kernel, Linear, Plan, on_one_thread
from omni_core.planner import probe, timing

# The kernels a weight's plan may use: compiled graphs read F.linear only (inductor packs its own
# weights and cannot trace a thread switch); stacked weights (the MoE's experts) and a machine without
# room for packed copies take no oneDNN.
ATEN_ONLY = frozenset({Kernel.ATEN})
NO_PACKING = frozenset({Kernel.ATEN, Kernel.SERIAL})
ALL_KERNELS = frozenset(Kernel)
TIMED_BYTES = 4 * 2**20  # weights this large choose their plan by timing: the kernel, not the calls, costs there
RULE = 15  # the way plans are chosen; a change of it makes every machine choose its plans again (store.py). 13: a
# plan whose run reaches 32 rows is checked on to 64 and then cuts calls there (probe.widened); 14: a large
# bfloat16 weight may take ONEDNN, and plans are timed over a sweep of copies of the weight (timing.timings);
# 15: a half-precision weight of under 64 outputs is ROWWISE (probe.too_narrow)

Key = tuple  # (shape, dtype, device type, bias?, kernels): what a plan depends on besides the machine


class Unplanned(LookupError):
    """A shape with no plan in `chosen`, where the caller asked not to probe (plan_linears(probe=False))."""


def choose(weight: torch.Tensor, bias: torch.Tensor | None, chosen: dict[Key, Plan],
           kernels: frozenset[Kernel] = ALL_KERNELS, probe: bool = True) -> Plan:
    """The plan for this weight's shape and dtype, probed once per key (kept in `chosen`); probe=False: raises
    Unplanned instead of probing."""
    key = (tuple(weight.shape), weight.dtype, weight.device.type, bias is not None, kernels)
    if key not in chosen:
        if not probe:
            raise Unplanned(key)
        chosen[key] = _choose(weight, bias, kernels)
    return chosen[key]


def timed(weight: torch.Tensor) -> bool:
    """A weight of TIMED_BYTES or more: its plan is chosen by timing."""
    return weight.numel() * weight.element_size() >= TIMED_BYTES


def may_pack(weight: torch.Tensor) -> bool:
    """A weight whose plan may be ONEDNN (where the kernels allow it): timed, and one oneDNN takes."""
    return timed(weight) and onednn.usable(weight)


def _choose(weight: torch.Tensor, bias: torch.Tensor | None, kernels: frozenset[Kernel]) -> Plan:
    """The fastest plan that holds, then widened (checked on 33-64 rows: only the plan kept pays for that); the
    probes share the weight's random rows and repeated calls (probe.Calls). A narrow half-precision weight: ROWWISE."""
    if probe.too_narrow(weight):
        return ROWWISE
    calls = probe.Calls(weight, bias)
    return probe.widened(_fastest_holding(weight, bias, kernels, calls), weight, bias, calls)


def _fastest_holding(weight: torch.Tensor, bias: torch.Tensor | None, kernels: frozenset[Kernel],
                     calls: probe.Calls) -> Plan:
    """The first plan that holds; then, where others hold too (a small weight's one-thread plan, a
    large weight's ONEDNN), the fastest of them. ONEDNN is checked only where it is timed fastest: of two plans
    (never more), the fastest that holds is then the one found (a large weight's check: some 1,000 GEMMs)."""
    large = timed(weight)
    others, packed = [], None
    if not large and Kernel.SERIAL in kernels and weight.device.type == "cpu":
        serial = serial_plan(weight, bias, calls)
        if serial != ROWWISE:
            others.append(serial)
        if torch.get_num_threads() == 1:  # the same calls; and a serial plan holds at any thread count
            return serial
    plan = probe.first_holding(weight, bias, calls)
    if plan == ROWWISE:
        return plan
    if large:
        packed = onednn.pack(weight) if Kernel.ONEDNN in kernels and may_pack(weight) else None
        if packed is not None:
            others.append(ONEDNN)
    if not others:
        return plan
    plans = [plan, *others]
    times = timing.timings(plans, weight, bias, packed=packed, evict=large, repeats=7 if large else 21)
    best = timing.fastest(plans, times)
    return best if best != ONEDNN or probe.holds(ONEDNN, weight, bias, packed=packed, calls=calls) else plan


def serial_plan(weight: torch.Tensor, bias: torch.Tensor | None, calls: probe.Calls | None = None) -> Plan:
    """The first plan that holds on one thread, as Kernel.SERIAL (which holds whatever the engine's threads);
    ROWWISE where none does."""
    plan = on_one_thread(probe.first_holding, weight, bias, calls)
    return plan if plan == ROWWISE else plan._replace(kernel=Kernel.SERIAL)


def plan_linears(modules, chosen: dict[Key, Plan] | None = None,
                 kernels: frozenset[Kernel] = ALL_KERNELS, probe: bool = True) -> dict[Key, Plan]:
    """Choose the plan of every batch-invariant matmul in `modules` (after their weights are loaded):
    each Linear, and each module with `plan_weights()` (the MoE router and experts, whose stacked
    weights are never packed), probing each distinct shape once.
    kernels: what a plan may use (ATEN_ONLY in compiled graphs; NO_PACKING where no packed copies fit).
    probe=False: only what `chosen` holds (Unplanned at the first shape it lacks).
    Returns the table {key: Plan}, `chosen` filled in."""
    chosen = {} if chosen is None else chosen
    for root in modules:
        for module in root.modules():
            if isinstance(module, Linear):
                module.set_plan(choose(module.weight, module.bias, chosen, kernels, probe))
            elif hasattr(module, "plan_weights"):
                stacked = NO_PACKING if Kernel.SERIAL in kernels else ATEN_ONLY
                module.plans = [choose(w, None, chosen, stacked, probe) for w in module.plan_weights()]
    return chosen
