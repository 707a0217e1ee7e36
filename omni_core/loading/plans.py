"""The batch-invariant matmul plans (models/invariant.py) kept per machine in the cache folder.

Choosing a shape's plan runs its GEMM some 1,500 times over 1..32 rows: 110 s of a 130 s load of
the real Qwen3-Omni widths in bfloat16 on a 2-core EPYC, most of it the 152k-row thinker head. The
answer depends on the shape, the dtype and the machine's kernels (cache.machine), never on the
weights' values, so a later load on the same machine reads it from
<cache folder>/plans/<machine>.json: one file per machine, {shape key: [pad_min, chunk]}.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch

from omni_core.cache import machine
from omni_core.models.invariant import Plan, plan_linears
from omni_core.synthetic.tiny import cache_dir


def path(device: torch.device) -> Path:
    return cache_dir() / "plans" / f"{machine(device)}.json"


def _name(key: tuple) -> str:
    """invariant.choose's key (shape, dtype, device type, bias?) as text: '2048x1024 bfloat16 cpu bias=False'."""
    shape, dtype, device_type, bias = key
    return f"{'x'.join(map(str, shape))} {str(dtype).replace('torch.', '')} {device_type} bias={bias}"


def _key(name: str) -> tuple:
    shape, dtype, device_type, bias = name.split(" ")
    return tuple(int(n) for n in shape.split("x")), getattr(torch, dtype), device_type, bias == "bias=True"


def read(device: torch.device) -> dict[tuple, Plan]:
    """The plans this machine chose before, by invariant.choose's key ({} if none or unreadable)."""
    try:
        table = json.loads(path(device).read_text())
        return {_key(name): Plan(*map(int, plan)) for name, plan in table.items()}
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


def plan_modules(modules, device: torch.device) -> dict[tuple, Plan]:
    """plan_linears(modules) with this machine's earlier answers: probes only the shapes it has not
    seen, and keeps those. Returns the plans probed now ({} when every shape was known)."""
    known = read(device)
    chosen = dict(known)
    plan_linears(modules, chosen)
    probed = {k: plan for k, plan in chosen.items() if k not in known}
    if probed:
        try:
            write(device, probed)
        except OSError:  # a read-only cache folder: the shapes are simply probed again next time
            pass
    return probed
