"""A compiled unit: one small function compiled once and called many times per frame, kept in the cache folder.

Compiling a whole predictor frame (15 steps unrolled) or a whole decode step (every layer) builds one large
graph per batch size: minutes each on 2 cores. What repeats inside them is small: a predictor step (the same
layers at the next position, the step's head and embedding passed in) and a decoder layer (each layer of a
stack passed in). A `Unit` compiles such a function with symbolic sizes (positions, cache lengths, batch rows
where the code allows it) and its modules as arguments (their weights are graph inputs, never constants), so
one compiled graph serves every step or every layer.

Dynamo specializes where the code branches on a size (a matmul plan that pads fewer rows than its kernel takes,
a batch of one row, a dense and a sparse MLP): each specialization is a *variant* of the unit, with the guards
that say which calls it serves. A unit is called with real arguments; the first variant whose guards accept
them runs. `ensure(examples)` builds every variant a list of example calls needs, once (the warm-up gives it
every shape the engine will call), and keeps them all in one file, which a later process reads in about a
second instead of tracing and compiling again (torch's `aot_compile`: dynamo's graph and guards, inductor's code).
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch._dynamo
import torch._inductor.config
import torch.fx.experimental._config

from omni_core.fast import packages

# The code launching the kernels is C++, not Python, built apart from the kernels (a shorter first
# compile at the same speed).
OPTIONS = {"cpp_wrapper": True, "cpp_wrapper_build_separate": True, **packages.CPU_KERNELS}


class Unit:
    """`fn` compiled per guard class (its variants), saved together at `path`.

    external: the objects `fn`'s closure holds that must not be pickled (a model), by name; f_globals: the
    globals of the module that defines `fn` (what its compiled bytecode reads)."""

    def __init__(self, fn: Callable, path: Path, what: str, f_globals: dict, external: dict | None = None):
        self.fn, self.path, self.what = fn, path, what
        self.f_globals, self.external = f_globals, external or {}
        self.variants: list = []
        self.read = False  # whether the file has been looked at
        self.built = 0  # variants this process compiled
        self.lock = threading.Lock()

    def __call__(self, *args):
        """fn(*args) through the first variant whose guards accept the arguments (compiled now if none does:
        `ensure` is there so that this never happens in a request)."""
        with torch.no_grad():  # what every variant is compiled under (its guards check it)
            for variant in self.variants:
                if variant.guard_check(*args):
                    return variant.fn(*args)
            self.ensure([args])
            for variant in self.variants:
                if variant.guard_check(*args):
                    return variant.fn(*args)
        raise RuntimeError(f"{self.what}: the variant compiled for this call does not accept it")

    def ensure(self, examples: Iterable[tuple], report: Callable[[str], None] | None = None) -> None:
        """Read the file (once), then compile a variant for every example call that no variant accepts, and
        save the file again if it grew. report(message): told what is compiled or loaded, and how long it took."""
        report = report or (lambda message: None)
        started = time.perf_counter()
        with self.lock:
            if not self.read:
                self.variants = self._load(report)
                self.read = True
            missing = [args for args in examples if not self._accepted(args)]
            if not missing:
                if self.variants:
                    report(f"{self.what}: {self._count()} loaded in {time.perf_counter() - started:.1f} s")
                return
            with packages.building(self.path):  # another process may be compiling the same unit: take its work
                self.variants = self._load(report) or self.variants
                before = len(self.variants)
                for args in missing:
                    if not self._accepted(args):
                        report(f"compiling {self.what} ({self._shape(args)}; kept in {self.path.parent} for the next start)")
                        self.variants.append(compile_function(self.fn, args))
                self.built += len(self.variants) - before
                if len(self.variants) > before:
                    self._save()
        report(f"{self.what}: {self._count()} ready in {time.perf_counter() - started:.0f} s")

    def _accepted(self, args: tuple) -> bool:
        with torch.no_grad():
            return any(variant.guard_check(*args) for variant in self.variants)

    def _count(self) -> str:
        return f"{len(self.variants)} variant{'s' if len(self.variants) != 1 else ''}"

    @staticmethod
    def _shape(args: tuple) -> str:
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        return "" if first is None else f"inputs {list(first.shape)}"

    def _load(self, report) -> list:
        """The variants saved at `path` ([] if it is missing; a damaged file, or one another torch wrote, is
        reported and compiled again)."""
        if not self.path.exists():
            return []
        try:
            with open(self.path, "rb") as file:
                blobs = pickle.load(file)
            variants = [torch.compiler.load_compiled_function(io.BytesIO(blob), f_globals=self.f_globals,
                                                              external_data=self.external) for blob in blobs]
        except Exception as exc:  # noqa: BLE001 (any failure to read means: build again)
            report(f"{self.path.name} could not be loaded ({exc}); compiling it again")
            return []
        packages.touch(self.path)
        return variants

    def _save(self) -> None:
        """Every variant into `path`, written under a temporary name and renamed into place."""
        blobs = [type(v).serialize(v, self.external).serialized_data for v in self.variants]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(tmp, "wb") as file:
                pickle.dump(blobs, file)
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        packages.prune(self.path.parent)


def compile_function(fn: Callable, args: tuple):
    """fn traced for `args` with every size symbolic (but 0 and 1, and those the code branches on) and compiled
    ahead of time: a function that checks its guards and runs inductor's code."""
    with torch.no_grad(), torch._dynamo.config.patch(specialize_float=True), \
            torch.fx.experimental._config.patch(use_duck_shape=False):
        return torch.compile(fn, fullgraph=True, dynamic=True, options=OPTIONS).aot_compile((args, {}))


class Units:
    """A holder of units (`self.units`: key → Unit): how many variants this process compiled and read."""

    units: dict

    @property
    def built(self) -> int:
        """Variants this process compiled."""
        return sum(unit.built for unit in self.units.values())

    @property
    def loaded(self) -> int:
        """Variants read from the cache folder."""
        return sum(len(unit.variants) - unit.built for unit in self.units.values())
