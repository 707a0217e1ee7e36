"""How fast the plans that hold for a weight are, and which of them to take.

Where several plans hold (the run's, its one-thread copy, oneDNN's), the kernels' speeds decide, and
they differ by CPU: they are timed on the real kernel at load. A lone request comes first (its
latency is what a listener hears), then batches (`fastest`).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from omni_core.models import onednn
from omni_core.models.invariant import Kernel, Plan, linear

LONE_ROW_SLACK = 1.5  # a plan's 1-row call may be at most this much slower than the fastest one's (`fastest`)


def fastest(plans: list[Plan], times: dict[Plan, tuple[float, float]]) -> Plan:
    """A lone request first: of the plans whose 1-row call is within LONE_ROW_SLACK of the fastest, the one
    fastest for 8 rows (ties: the earlier). times: {plan: (seconds for 1 row, for 8 rows)}.
    The slack lets a plan that pads a lone row slightly win where it runs batches several times faster
    (the timings that set it: BENCHMARKS.md, "Batch invariance")."""
    lone = min(times[p][0] for p in plans)
    return min((p for p in plans if times[p][0] <= LONE_ROW_SLACK * lone), key=lambda p: times[p][1])


def timings(plans: list[Plan], weight: torch.Tensor, bias: torch.Tensor | None = None,
            repeats: int = 7, packed: torch.Tensor | None = None, evict: bool = True) -> dict[Plan, tuple[float, float]]:
    """{plan: (median seconds of a 1-row call, of an 8-row call)}, the plans interleaved in each round.
    evict: each call timed with its weight read from memory, as a step of a model larger than the cache reads
    its layers: a sweep over distinct copies of the weight that together fill twice the CPU's last-level cache,
    timed whole, per copy. (A weight timed hot from the cache favours other kernels than the engine does; one
    call timed just after flushing the cache with writes timed the flush's aftermath too, and ranked MKL's and
    oneDNN's bfloat16 calls by chance: BENCHMARKS.md, "Batch invariance".) A small model's weights stay cached."""
    x = torch.randn(8, weight.shape[1], device=weight.device).to(weight.dtype)
    cold = evict and weight.device.type == "cpu"
    copies = [weight] + [weight.clone() for _ in range(_copies(weight) - 1)] if cold else [weight]
    packs = [None] * len(copies)
    if any(p.kernel is Kernel.ONEDNN for p in plans):  # each copy's own packed copy (the caller's for the first)
        packs = [packed if packed is not None else onednn.pack(weight)] + [onednn.pack(w) for w in copies[1:]]
    times: dict[tuple, list[float]] = {(p, n): [] for p in plans for n in (1, 8)}
    with torch.no_grad():
        for round_ in range(repeats + 1):  # the first round warms up
            for p in plans:
                for n in (1, 8):
                    if weight.is_cuda:
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    for w, pw in zip(copies, packs):
                        linear(x[:n], w, bias, p, pw)
                    if weight.is_cuda:
                        torch.cuda.synchronize()
                    if round_:
                        times[p, n].append((time.perf_counter() - start) / len(copies))
    return {p: (statistics.median(times[p, 1]), statistics.median(times[p, 8])) for p in plans}


def _copies(weight: torch.Tensor) -> int:
    """How many copies of `weight` fill twice the last-level cache (one, for a weight that large itself)."""
    return max(1, -(-cache_bytes() // (weight.numel() * weight.element_size())))


def cache_bytes() -> int:
    """Twice the CPU's last-level cache (Linux's sysfs), or 128 MB where it cannot be read."""
    try:
        size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        return 2 * int(size.rstrip("K")) * 1024
    except (OSError, ValueError):
        return 128 * 2**20
