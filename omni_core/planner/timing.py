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
    evict: each call timed with the weight out of the CPU's caches, as a step of a model larger than the
    cache meets it (a weight timed hot from the cache favours other kernels than the engine does); a
    small model's weights stay cached."""
    x = torch.randn(8, weight.shape[1], device=weight.device).to(weight.dtype)
    if packed is None and any(p.kernel is Kernel.ONEDNN for p in plans):
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
