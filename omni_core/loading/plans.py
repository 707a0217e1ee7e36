"""The batch-invariant matmul plans (models/invariant.py) kept per machine in the cache folder.

Choosing a shape's plan runs its GEMM some 1,500 times over 1..32 rows: 110 s of a 130 s load of
the real Qwen3-Omni widths in bfloat16 on a 2-core EPYC, most of it the 152k-row thinker head. The
answer depends on the shape, the dtype and the machine's kernels (cache.machine), never on the
weights' values, so a later load on the same machine reads it from
<cache folder>/plans/<machine>-rule<N>.json: one file per machine and way of choosing
(invariant.RULE), {shape key: [pad_min, chunk, kernel]} (invariant.Plan).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from omni_core.cache import cache_dir, machine
from omni_core.loading import memory
from omni_core.models.invariant import ALL_KERNELS, ATEN_ONLY, NO_PACKING, RULE, TIMED_BYTES, Linear, Plan, plan_linears

PACK_HEADROOM = 0.5  # of the packed bytes, left free after packing (the requests' caches, the page)


def room_to_pack(modules, device: torch.device) -> bool:
    """Whether a packed copy of every float32 Linear weight of TIMED_BYTES or more fits in the memory free
    now, with PACK_HEADROOM of the total left over (oneDNN plans keep one beside the plain weight)."""
    sizes = [m.weight.numel() * m.weight.element_size() for root in modules for m in root.modules()
             if isinstance(m, Linear) and m.weight.dtype == torch.float32 and m.weight.numel() * 4 >= TIMED_BYTES]
    free = memory.free_bytes(device)
    return free is None or sum(sizes) * (1 + PACK_HEADROOM) <= free


def path(device: torch.device) -> Path:
    return cache_dir() / "plans" / f"{machine(device)}-rule{RULE}.json"  # a new rule chooses again


def _name(key: tuple) -> str:
    """invariant.choose's key (shape, dtype, device type, bias?, kernels) as text:
    '2048x1024 bfloat16 cpu bias=False kernels=aten+serial'."""
    shape, dtype, device_type, bias, kernels = key
    return f"{'x'.join(map(str, shape))} {str(dtype).replace('torch.', '')} {device_type} bias={bias} kernels={kernels}"


def _key(name: str) -> tuple:
    shape, dtype, device_type, bias, kernels = name.split(" ")
    return (tuple(int(n) for n in shape.split("x")), getattr(torch, dtype), device_type, bias == "bias=True",
            kernels.removeprefix("kernels="))


def read(device: torch.device) -> dict[tuple, Plan]:
    """The plans this machine chose before, by invariant.choose's key ({} if none or unreadable)."""
    try:
        table = json.loads(path(device).read_text())
        return {_key(name): Plan(int(pad_min), int(chunk), str(kernel)) for name, (pad_min, chunk, kernel) in table.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write(device: torch.device, table: dict[tuple, Plan]) -> None:
    """Merge `table` into this machine's file, atomically (concurrent loads each write a whole file)."""
    target = path(device)
    merged = {_name(k): list(plan) for k, plan in {**read(device), **table}.items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as f:
        json.dump(dict(sorted(merged.items())), f, indent=0)
    os.replace(f.name, target)


def plan_modules(modules, device: torch.device, fast_kernels: bool = True) -> dict[tuple, Plan]:
    """plan_linears(modules) with this machine's earlier answers: probes only the shapes it has not
    seen, and keeps those. Returns the plans probed now ({} when every shape was known).
    fast_kernels: kernels besides F.linear allowed (False in compiled pipelines); oneDNN's only where their
    packed copies fit beside the weights (`room_to_pack`)."""
    modules = list(modules)
    known = read(device)
    chosen = dict(known)
    kernels = ATEN_ONLY if not fast_kernels else ALL_KERNELS if room_to_pack(modules, device) else NO_PACKING
    plan_linears(modules, chosen, kernels)
    probed = {k: plan for k, plan in chosen.items() if k not in known}
    if probed:
        try:
            write(device, probed)
        except OSError:  # a read-only cache folder: the shapes are simply probed again next time
            pass
    return probed

