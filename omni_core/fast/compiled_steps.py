"""Compiled decode steps of the thinker and of the talker: `load_pipeline(..., compile=True)`.

`CompiledSteps` (`DecoderStack.rows_step`) runs one new token for every row of the engine's step in one
call, each row with its own cache (projections and MoE batched through the batch-invariant matmuls,
attention per row over exactly its own past, as alone), rows padded with spare rows to their bucket.
Eager decoding there is bound by dispatch: the norms, rotations and attention between the matmuls cost
milliseconds per step on a CPU, which inductor fuses. Cache lengths and capacities are symbolic, so
growing and staggered caches run the same code. Each bucket's step is compiled ahead of time (torch's
`aot_compile`: dynamo's graph and guards, inductor's code) into a file in the cache folder beside the
predictor's packages (compiled.py): a later process loads it instead of tracing and compiling again
(tens of seconds per step on 2 cores). A stack's steps are its own (their names hold a digest of its
weights and plans).

Eager is the reference; compiled must give the same codes (tests/test_compiled.py).
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

import torch
import torch._dynamo
import torch._inductor.config
import torch.fx.experimental._config

from omni_core.fast import packages
from omni_core.fast.buckets import bucket, buckets_up_to, chunks
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import KVCache

# The code launching the kernels is C++, not Python, built apart from the kernels (a shorter first
# compile at the same speed).
OPTIONS = {"cpp_wrapper": True, "cpp_wrapper_build_separate": True, **packages.CPU_KERNELS}

SPARE_LENGTH = 2  # a padding row's cache length: its write lands on the same slot every step


class CompiledSteps:
    """A stack's decode step (`DecoderStack.layers_rows`), compiled per batch bucket: B rows run as one
    call, padded with spare rows (zero inputs, caches of their own that are written, never advanced).
    Each bucket's step is compiled ahead of time (dynamo's graph and guards, inductor's code) into a
    file in the cache folder; a later process loads it (a second or two) instead of tracing again (the
    graph holds every row's attention: tens of seconds per bucket even with inductor's cache warm).

    The guards of a loaded step are checked at every call; a call they refuse raises. They hold for any
    cache of length >= 1 with a free slot after the new position (`reserve`), which every call ensures."""

    def __init__(self, stack: DecoderStack):
        self.stack = stack
        self.steps: dict[tuple, object] = {}  # (bucket, dtype, device) → the compiled step
        self.built = self.loaded = 0  # steps compiled by this object / read from the cache
        self.lock = threading.Lock()
        self._spares: list[KVCache] = []
        self._digest: str | None = None  # of the stack's weights and plans (read-only once loaded)

    def __call__(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """layers_rows for B rows: h [B, 1, C], cos/sin [B, 1, 1, D] → [B, 1, C] (caches written, not advanced)."""
        with torch.no_grad():  # the guards hold grad mode off, as the engine runs
            parts = [self._bucket(h[rows], cos[rows], sin[rows], caches[rows]) for rows in chunks(h.shape[0])]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _bucket(self, h, cos, sin, caches: list[KVCache]) -> torch.Tensor:
        B = h.shape[0]
        size = bucket(B)
        pad = size - B
        for cache in caches:
            cache.reserve(cache.length + 2)  # the free slot the guards want after the new position
        # New tensors, never views (the guards would hold the base's sizes), zero rows after: [size, ...]
        h, cos, sin = (torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) for t in (h, cos, sin))
        return self.step(size, h.dtype, h.device)(h, cos, sin, caches + self.spares(pad, h))[:B]

    def spares(self, n: int, like: torch.Tensor) -> list[KVCache]:
        """n caches for padding rows (length SPARE_LENGTH), kept across calls."""
        if self._spares and (self._spares[0].k[0].dtype, self._spares[0].k[0].device) != (like.dtype, like.device):
            self._spares = []
        while len(self._spares) < n:
            cache = self.stack.new_cache(1, SPARE_LENGTH + 2, like)
            cache.length = SPARE_LENGTH
            self._spares.append(cache)
        return self._spares[:n]

    def step(self, size: int, dtype: torch.dtype, device: torch.device, report=None):
        """The compiled step for `size` rows: loaded once, from the cache folder, built there if missing."""
        what = (size, dtype, device)
        if what not in self.steps:
            with self.lock:
                if what not in self.steps:
                    self.steps[what] = self._load(size, dtype, device, report or (lambda message: None))
        return self.steps[what]

    def path(self, size: int, dtype: torch.dtype, device: torch.device) -> Path:
        if self._digest is None:
            self._digest = packages.module_digest(self.stack)
        what = dict(fn="step", stack=type(self.stack).__name__, rows=size, dtype=dtype, device=device.type)
        return packages.folder() / packages.key(what, self._digest, suffix=".step")

    def _load(self, size, dtype, device, report):
        path = self.path(size, dtype, device)
        what = f"the {type(self.stack).__name__} decode step for {size} row{'s' if size > 1 else ''}"
        step, built = packages.read_or_build(path, what, self._read, lambda: self._save(size, dtype, device, path),
                                             report, "tens of seconds on 2 cores")
        self.built += built
        self.loaded += not built
        return step

    def _read(self, path: Path):
        """The step saved at `path` (raises if it is damaged or another torch wrote it)."""
        with open(path, "rb") as file:
            step = torch.compiler.load_compiled_function(file, f_globals=globals(), external_data={"stack": self.stack})
        packages.touch(path)
        return step

    def _save(self, size: int, dtype: torch.dtype, device: torch.device, path: Path):
        """The step built (`_build`) and saved at `path` (under a temporary name, renamed into place)."""
        step = self._build(size, dtype, device)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            step.save_compiled_function(str(tmp), external_data={"stack": self.stack})
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        packages.prune(path.parent)
        return step

    def _build(self, size: int, dtype: torch.dtype, device: torch.device):
        """Trace and compile layers_rows for `size` rows on example caches whose lengths and capacities all
        differ and exceed 1 (sizes 0 and 1, or two equal ones, would be built in as constants)."""
        like = torch.empty((), dtype=dtype, device=device)
        caches = []
        for b in range(size):
            cache = self.stack.new_cache(1, 2 * size + 5 + 3 * b, like)
            cache.length = 2 + b
            for buf in cache.k + cache.v:
                torch._dynamo.mark_dynamic(buf, 2)
            caches.append(cache)
        h = torch.zeros(size, 1, self.stack.cfg.hidden_size, dtype=dtype, device=device)
        cos, sin = self.stack.row_tables(caches, h)
        stack = self.stack

        def step(h, cos, sin, caches):
            return stack.layers_rows(h, cos, sin, caches)

        # The guards' state is pickled with the stack's attributes: not this object (its lock cannot be)
        saved, stack.rows_step = stack.rows_step, None
        try:
            with torch.no_grad(), torch._dynamo.config.patch(specialize_float=True), \
                    torch.fx.experimental._config.patch(use_duck_shape=False):
                return torch.compile(step, fullgraph=True, dynamic=True, options=OPTIONS).aot_compile(
                    ((h, cos, sin, caches), {}))
        finally:
            stack.rows_step = saved

    def pieces(self, max_rows: int) -> list:
        """What `warm_up` loads or builds: a call (taking report) per bucket a batch of up to `max_rows` rows uses."""
        like = self.stack.norm.weight
        return [functools.partial(self.step, size, like.dtype, like.device) for size in buckets_up_to(max_rows)]

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) the step of every bucket a batch of up to `max_rows` rows uses."""
        for piece in self.pieces(max_rows):
            piece(report)


def compile_steps(stack: DecoderStack) -> CompiledSteps:
    """Give `stack` compiled decode steps (its decode_rows calls them); returns them.
    A loaded step's C++ is built again unless inductor's cache folder still holds it (~13 s a step on 2
    cores): unless TORCHINDUCTOR_CACHE_DIR says otherwise, that folder is the cache folder's "inductor"
    (kept like the steps), not torch's default in /tmp (gone at a reboot)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(packages.folder().parent / "inductor"))
    stack.rows_step = CompiledSteps(stack)
    return stack.rows_step
