"""Compiled code kept across processes: the cache folder's compiled units (units.py), their names and pruning.

A unit's file name holds a digest of everything its code depends on (`key`): what it is (function, part,
sampling, dtype, device), the module's parameters (names, shapes, strides and dtypes, not their values:
weights are the compiled code's inputs) and matmul plans, the kernel threads (the GEMMs' bits depend on
them), the machine (cache.machine: its C++ is built for this CPU), torch's version and omni_core's own
source. Anything else gets another file; files are written to a temporary name and renamed into place, so
two processes building the same one never see half of it, and a process about to build one takes its lock
file first (`building`): a second process that wants the same unit (a second test worker, a second start)
waits for the first one's build and loads it instead of compiling it again beside it. Files no process has
loaded for 30 days are deleted when a new one is built (`prune`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import time
from pathlib import Path

import torch

from omni_core.cache import cache_dir, locked, machine

FORMAT = 2  # bump when what a unit holds changes in a way the key does not see
# Inductor's own kernels (the norms, softmaxes and elementwise ops between the GEMMs) run on one thread. On
# more, it split a lone row's long sums across the threads (the softmax over 2048 codes of a 1-row frame, a norm
# at real widths) and added the parts, while each row of a batch is summed whole by one thread: a row got other
# last bits alone than beside others. The GEMMs it calls keep the engine's threads.
CPU_KERNELS = {"cpp.threads": 1}


def folder() -> Path:
    """Where compiled units live: <OMNI_CORE_CACHE or ~/.cache/omni_core>/compiled."""
    return cache_dir() / "compiled"


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """Every .py file of omni_core (any change to the code may change a compiled graph)."""
    root, h = Path(__file__).parent.parent, hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def module_digest(module: torch.nn.Module) -> str:
    """The module's parameters and buffers (name, shape, strides, dtype) and every matmul plan: what compiled
    code depends on (the weights themselves are its inputs, read at every call)."""
    h = hashlib.sha256()
    for name, t in itertools.chain(module.named_parameters(), module.named_buffers()):
        h.update(f"{name} {tuple(t.shape)} {t.stride()} {t.dtype}\0".encode())
    for name, sub in module.named_modules():
        for attr in ("plan", "plans"):
            if attr in vars(sub) or attr in vars(type(sub)):
                h.update(f"{name}.{attr}={getattr(sub, attr)!r}\0".encode())
    return h.hexdigest()


def key(what: dict, module_digest: str, suffix: str = ".unit") -> str:
    """A unit's file name: `what` (readable) plus a digest of it, the module and the versions."""
    # machine() holds the kernel threads (the GEMMs' plans depend on them) and torch's build
    parts = dict(what, module=module_digest, machine=machine(torch.device(what["device"])), source=source_digest(),
                 format=FORMAT)
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]
    readable = "-".join(str(v).replace("torch.", "") for v in what.values())
    return f"{readable}-{digest}{suffix}"


# Held while this process builds the unit `path`: a process that wants the same unit waits, then finds
# it built. A build takes no other lock.
building = locked


def touch(path: Path) -> None:
    """Mark a file in the cache folder used (its modification time), which `prune` goes by."""
    try:
        os.utime(path)
    except OSError:  # a read-only cache folder
        pass


SUFFIXES = (".unit", ".lock", ".pt2", ".step")  # what `prune` may delete (a lock file: `building`; the last two:
# the whole frames and decode steps compiled before units)
UNUSED_DAYS = 30  # a file no process loaded for this long is deleted when another one is built


def prune(folder: Path, days: float = UNUSED_DAYS) -> list[Path]:
    """Delete the files in `folder` that no process has loaded or built for `days`: every change to
    omni_core's code, the shapes or torch names new ones, and the old ones would pile up. Returns what it
    deleted."""
    cutoff, gone = time.time() - days * 86400, []
    for old in itertools.chain(*(folder.glob(f"*{suffix}") for suffix in SUFFIXES)):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
                gone.append(old)
        except OSError:  # gone already (another process pruned it), or not ours to delete
            pass
    return gone
