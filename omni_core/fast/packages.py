"""Compiled code kept across processes: AOTInductor packages in the cache folder.

torch.compile's on-disk cache cannot serve the predictor frames: their weights are frozen
into the graph and pre-packed for MKL, and inductor's FX graph cache cannot pickle packed
(mkldnn) tensors ("Bypassing FX Graph Cache because 'mkldnn tensors unpickleable'"), so
every process compiled every frame again: about 10 minutes for `max_batch=4` on 2 cores.
A frame is instead exported once (torch.export) and compiled ahead of time into a
package (`torch._inductor.aoti_compile_and_package`, with the same freezing); a later
process loads it in under a second.

A package's name holds a digest of everything its code depends on (`key`): what it is
(function, batch bucket, dtype, device), the module's parameters (names, shapes, strides,
dtypes and bytes) and matmul plans, the kernel threads (the GEMMs' bits depend on them), the machine
(cache.machine: its C++ is built for this CPU), torch's version and omni_core's own source. Anything
else gets another package; packages are written to a temporary name and renamed into place, so two
processes building the same one never see half of it, and a process about to build one takes its lock
file first (`building`): a second process that wants the same package (a second test worker, a second
start) waits for the first one's build and loads it instead of compiling it again beside it. Packages no process has loaded for 30
days are deleted when a new one is built (`prune`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

import torch

from omni_core.cache import cache_dir, locked, machine

FORMAT = 1  # bump when what a package holds changes in a way the key does not see
# Inductor's own kernels (the norms, softmaxes and elementwise ops between the GEMMs) run on one thread. On
# more, it split a lone row's long sums across the threads (the softmax over 2048 codes of a 1-row frame, a norm
# at real widths) and added the parts, while each row of a batch is summed whole by one thread: a row got other
# last bits alone than beside others. The GEMMs it calls keep the engine's threads.
CPU_KERNELS = {"cpp.threads": 1}


def folder() -> Path:
    """Where packages live: <OMNI_CORE_CACHE or ~/.cache/omni_core>/compiled."""
    return cache_dir() / "compiled"


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """Every .py file of omni_core (any change to the code may change a compiled graph)."""
    root, h = Path(__file__).parent.parent, hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def module_digest(module: torch.nn.Module) -> str:
    """The module's parameters and buffers (name, shape, strides, dtype, bytes) and every matmul plan."""
    h = hashlib.sha256()
    for name, t in itertools.chain(module.named_parameters(), module.named_buffers()):
        h.update(f"{name} {tuple(t.shape)} {t.stride()} {t.dtype}\0".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    for name, sub in module.named_modules():
        for attr in ("plan", "plans"):
            if attr in vars(sub) or attr in vars(type(sub)):
                h.update(f"{name}.{attr}={getattr(sub, attr)!r}\0".encode())
    return h.hexdigest()


def key(what: dict, module_digest: str, suffix: str = ".pt2") -> str:
    """A package's file name: `what` (readable) plus a digest of it, the module and the versions.
    suffix: ".pt2" (an AOTInductor package) or ".step" (a compiled decode step: compiled.py)."""
    # machine() holds the kernel threads (the GEMMs' plans depend on them) and torch's build
    parts = dict(what, module=module_digest, machine=machine(torch.device(what["device"])), source=source_digest(),
                 format=FORMAT)
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]
    readable = "-".join(str(v).replace("torch.", "") for v in what.values())
    return f"{readable}-{digest}{suffix}"


def build(module: torch.nn.Module, args: tuple, path: Path) -> None:
    """Export `module` for `args` (fixed shapes) and compile it into the package `path` (freezing its
    weights, as the in-process compile does), written under a temporary name and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.pt2")  # the name must end in .pt2
    try:
        with torch.no_grad():
            program = torch.export.export(module, args, strict=True)
            torch._inductor.aoti_compile_and_package(program, package_path=str(tmp),
                                                     inductor_configs={"freezing": True, **CPU_KERNELS})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    prune(path.parent)


# Held while this process builds the package `path`: a process that wants the same package waits, then finds
# it built. A build takes no other lock.
building = locked


def read_or_build(path: Path, what: str, read: Callable[[Path], object], build: Callable[[], object],
                  report: Callable[[str], None], takes: str) -> tuple[object, bool]:
    """What `read(path)` gives; if `path` is missing or cannot be read, what `build()` gives (it also writes
    `path`), built under `building(path)`: a second process that wants it waits and reads it instead.
    what: the piece, for report(message) (told what happens); takes: how long a build takes.
    Returns (the piece, whether this process built it)."""
    started = time.perf_counter()

    def attempt(label: str):
        try:
            piece = read(path)
        except Exception as exc:  # a damaged file, or one another torch wrote: build it again
            report(f"{path.name} could not be loaded ({exc}); compiling it again")
            return None
        report(f"{label}: loaded in {time.perf_counter() - started:.1f} s")
        return piece

    found = path.exists()
    piece = attempt(what) if found else None
    if piece is None:
        with building(path):
            if not found and path.exists():  # another process built it meanwhile
                piece = attempt(f"{what} (another process built it)")
            if piece is None:
                report(f"compiling {what} ({takes}; kept in {path.parent} for the next start)")
                piece = build()
                report(f"{what}: compiled in {time.perf_counter() - started:.0f} s")
                return piece, True
    return piece, False


_loading = threading.Lock()  # one load at a time: `_extracted` tells this load's folder from another's


def load(path: Path) -> Callable:
    """The package's compiled function: call it with the exported arguments; returns its outputs.
    Marks the file used (its modification time), which `prune` goes by.

    torch extracts the package into a temporary folder (aotinductor_XXXXXX) and deletes it only when
    the process exits normally: a process that is killed (a stopped Space, SIGTERM, an out-of-memory
    kill) leaves it behind, 24 MB a frame for the tiny model and 4.7 GB at real size. The loaded code is
    mapped into memory by then, so the folder is deleted right after loading (on Linux, where the
    process's mappings name it)."""
    with _loading:
        before = _extracted()
        frame = torch._inductor.aoti_load_package(str(path))
        for folder in _extracted() - before:
            shutil.rmtree(folder, ignore_errors=True)
    touch(path)
    return frame


def touch(path: Path) -> None:
    """Mark a file in the cache folder used (its modification time), which `prune` goes by."""
    try:
        os.utime(path)
    except OSError:  # a read-only cache folder
        pass


def _extracted() -> set[Path]:
    """The temporary folders (aotinductor_XXXXXX) of extracted packages whose files this process has
    mapped; empty where /proc/self/maps is missing (not Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    found = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode[, path]
        if len(fields) == 6:
            found.update(p for p in Path(fields[5]).parents if p.name.startswith("aotinductor_"))
    return found


SUFFIXES = (".pt2", ".step", ".lock")  # what `prune` may delete (a lock file: `building`)
UNUSED_DAYS = 30  # a package no process loaded for this long is deleted when another one is built


def prune(folder: Path, days: float = UNUSED_DAYS) -> list[Path]:
    """Delete the packages in `folder` that no process has loaded or built for `days`: every change to
    omni_core's code, the weights or torch names new ones (25-100 MB each for the tiny model, far more
    at real size), and the old ones would pile up. Returns what it deleted."""
    cutoff, gone = time.time() - days * 86400, []
    for old in itertools.chain(*(folder.glob(f"*{suffix}") for suffix in SUFFIXES)):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
                gone.append(old)
        except OSError:  # gone already (another process pruned it), or not ours to delete
            pass
    return gone
