"""The cache folder, and what its machine-made entries are keyed by: the machine that made them.

`cache_dir()` is the one place that names the folder: $OMNI_CORE_CACHE, else
$XDG_CACHE_HOME/omni_core, else ~/.cache/omni_core. It holds the tiny checkpoints (synthetic/),
the matmul plans, the codec's batching answer and the compiled frames.

Two kinds of entries are only right on the machine that made them: the batch-invariant matmul
plans (planner/store.py: which row counts share a GEMM kernel is the CPU's and the BLAS's) and
the compiled units (fast/packages.py: C++ built with -march=native). A cache folder
shared across machines (a network home, a copied ~/.cache) must never hand one machine's
entries to another, so both keys hold `machine()`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

def cache_dir() -> Path:
    base = os.environ.get("OMNI_CORE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "omni_core")
    return Path(base)


_CPU_FIELDS = ("vendor_id", "cpu family", "model", "stepping", "model name", "flags")


@functools.lru_cache(maxsize=1)
def _cpu() -> str:
    """The first processor's identity lines of /proc/cpuinfo (its flags say which kernels run), or
    what `platform` knows elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n", 1)[0]
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    lines = [line.split(":", 1) for line in first.splitlines() if ":" in line]
    return "\n".join(f"{k.strip()}={v.strip()}" for k, v in lines if k.strip() in _CPU_FIELDS)


# Environment variables that change which kernels MKL, oneDNN and ATen pick (e.g. MKL_CBWR, ATEN_CPU_CAPABILITY),
# and how OpenMP's waiting threads wait: where they sleep (OMP_WAIT_POLICY=PASSIVE, as the test script sets), every
# multi-thread call pays a wake-up and the planner times small weights faster on one thread; where they spin (the
# default), the same weights run faster on all of them. Plans timed under one policy are not another's.
_KERNEL_ENV = ("MKL_", "DNNL_", "ONEDNN_", "ATEN_CPU_CAPABILITY", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def machine(device: torch.device) -> str:
    """A short digest of what decides a kernel's bits and instructions on `device`: the CPU (or GPU),
    torch's version and build (its MKL and oneDNN versions), the kernel threads and the environment
    variables that steer the kernel libraries."""
    env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(_KERNEL_ENV))
    parts = [_cpu(), torch.__version__, torch.__config__.show(), f"threads={torch.get_num_threads()}", *env]
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        parts += [torch.cuda.get_device_name(index), str(torch.cuda.get_device_capability(index)),
                  str(torch.version.cuda)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@contextlib.contextmanager
def locked(path: Path):
    """Held while this process writes the cache file `path` (an exclusive lock on a file beside it,
    `.NAME.lock`): another process that wants to write it waits here, then finds what this one wrote.
    Never hold another lock inside (no two processes then wait for each other). Without fcntl (not POSIX)
    or where the lock file cannot be made (a read-only cache folder) nothing is locked."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(f".{path.name}.lock"), "w")  # "w": its time says it was used (packages.prune)
    except (ImportError, OSError):
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_json(target: Path, table: dict) -> None:
    """`table` as the JSON file `target`, keys sorted, replaced whole (a reader never meets half a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as f:
        json.dump(dict(sorted(table.items())), f, indent=0)
    os.replace(f.name, target)
