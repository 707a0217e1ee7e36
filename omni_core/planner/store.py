"""The plans kept per machine in the cache folder, so a later load on the same machine probes nothing.

Choosing a shape's plan runs its GEMM some 1,500 times over 1..64 rows, most of a first load's time
at real widths (BENCHMARKS.md, "Batch invariance"). The answer depends on the shape, the dtype and
the machine's kernels (cache.machine), never on the weights' values, so it is kept in
<cache folder>/plans/<machine>-rule<N>.json: one file per machine and way of choosing (choose.RULE),
one line per key, e.g.

    "2048x1024 bfloat16 cpu bias=False kernels=aten+serial": [2, 32, "aten"]

(the key: choose.Key; the value: Plan's pad_min, chunk and Kernel's value).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from omni_core.cache import cache_dir, locked, machine, write_json
from omni_core.loading import memory
from omni_core.models.invariant import Kernel, Linear, Plan
from omni_core.planner.choose import (ALL_KERNELS, ATEN_ONLY, NO_PACKING, RULE, Key, Unplanned, may_pack,
                                     plan_linears)

PACK_HEADROOM = 0.5  # of the packed bytes, left free after packing (the requests' caches, the page)


def plan_modules(modules, device: torch.device, fast_kernels: bool = True) -> dict[Key, Plan]:
    """plan_linears(modules) with this machine's earlier answers: probes only the shapes it has not
    seen, and keeps those. Returns the plans probed now ({} when every shape was known).
    fast_kernels: kernels besides F.linear allowed (False in compiled pipelines); oneDNN's only where their
    packed copies fit beside the weights (`room_to_pack`)."""
    modules = list(modules)
    kernels = ATEN_ONLY if not fast_kernels else ALL_KERNELS if room_to_pack(modules, device) else NO_PACKING
    try:  # every shape known (the file is replaced whole, never half-written): no lock, nothing to probe
        plan_linears(modules, read(device), kernels, probe=False)
        return {}
    except Unplanned:
        pass
    # One process probes at a time, and the first answer stays: plans are chosen partly by timing, so two
    # processes probing a shape together could choose differently, and a later load in either would then
    # read the other's plan and give other last bits than its first load did.
    with locked(path(device)):
        known = read(device)
        chosen = dict(known)
        plan_linears(modules, chosen, kernels)
        probed = {k: plan for k, plan in chosen.items() if k not in known}
        if probed:
            try:
                write(device, probed)
            except OSError:  # a read-only cache folder: the shapes are simply probed again next time
                pass
    return probed


def room_to_pack(modules, device: torch.device) -> bool:
    """Whether a packed copy of every Linear weight that oneDNN may take (`choose.may_pack`) fits in the memory
    free now, with PACK_HEADROOM of the total left over (oneDNN plans keep one beside the plain weight)."""
    sizes = [m.weight.numel() * m.weight.element_size() for root in modules for m in root.modules()
             if isinstance(m, Linear) and may_pack(m.weight)]
    free = memory.free_bytes(device)
    return free is None or sum(sizes) * (1 + PACK_HEADROOM) <= free


def path(device: torch.device) -> Path:
    return cache_dir() / "plans" / f"{machine(device)}-rule{RULE}.json"  # a new rule chooses again


def read(device: torch.device) -> dict[Key, Plan]:
    """The plans this machine chose before ({} if none or unreadable)."""
    try:
        table = json.loads(path(device).read_text())
        return {_key(name): Plan(int(pad_min), int(chunk), Kernel(kernel)) for name, (pad_min, chunk, kernel) in table.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write(device: torch.device, table: dict[Key, Plan]) -> None:
    """Merge `table` into this machine's file, atomically (concurrent loads each write a whole file)."""
    write_json(path(device), {_name(k): [plan.pad_min, plan.chunk, plan.kernel.value]
                              for k, plan in {**read(device), **table}.items()})


def _name(key: Key) -> str:
    """A key as its line's text: '2048x1024 bfloat16 cpu bias=False kernels=aten+serial' (the kernels in
    Kernel's order)."""
    shape, dtype, device_type, bias, kernels = key
    names = "+".join(k.value for k in Kernel if k in kernels)
    return f"{'x'.join(map(str, shape))} {str(dtype).replace('torch.', '')} {device_type} bias={bias} kernels={names}"


def _key(name: str) -> Key:
    shape, dtype, device_type, bias, kernels = name.split(" ")
    return (tuple(int(n) for n in shape.split("x")), getattr(torch, dtype), device_type, bias == "bias=True",
            frozenset(Kernel(k) for k in kernels.removeprefix("kernels=").split("+")))
