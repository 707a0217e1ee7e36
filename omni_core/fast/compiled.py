"""Compiled decode hot paths: `load_pipeline(..., compile=True)`.

Decoding a small model in eager PyTorch is bound by dispatch, not arithmetic: a tiny
predictor frame is ~400 ops of a few µs each, and at real size the norms, rotations
and attention between the matmuls still cost ~2 ms per step on a CPU. Inductor fuses
those chains into a few C++ loops and, with its C++ wrapper, launches the kernels
without Python in between. What is compiled:

- a whole frame of either code predictor (the 15 steps unrolled: fixed shapes for a
  batch bucket; the re-prefill predictor at 1 row only, its batches row by row: ROW_BY_ROW),
  with the sampling noise passed in, so a seed draws the codes eager draws;
  one graph serves greedy and sampled rows together (`greedy_rows`), and returns the codes'
  top-5 alternatives too; a second, greedy-only graph serves batches whose rows all decode
  greedily (the default request): no noise, no top-k or top-p over the vocabulary, about
  half the time of the first at 8 rows;
  Its weights are frozen into the graph (they are read-only after loading): inductor
  then keeps float32 matmul weights pre-packed for MKL, which multiplies a batch of 16
  rows ~1.7x faster than the unpacked GEMM (measured: 122 vs 71 GFLOPS on 2 cores), at
  the cost of a packed copy of the predictor's weights per batch size. The frames are
  compiled ahead of time (AOTInductor) into packages kept in the cache folder
  (packages.py): the first start compiles them, a later one loads them;
- the decode step of the thinker and of the talker (`CompiledSteps`, `DecoderStack.rows_step`): one
  new token for every row of the engine's step in one call, each row with its own cache (projections
  and MoE batched through the batch-invariant matmuls, attention per row over exactly its own past, as
  alone), rows padded with spare rows to their bucket. Cache lengths and capacities are symbolic, so
  growing and staggered caches run the same code. Each bucket's step is compiled ahead of time
  (torch's `aot_compile`: dynamo's graph and guards, inductor's code) into a file in the cache folder
  beside the packages: a later process loads it instead of tracing and compiling again.

A predictor's packages and a stack's steps are its own (their names hold a digest of its weights).

Eager is the reference; compiled must give the same codes (tests/test_compiled.py).
The first process compiles: a minute or more per predictor frame for the tiny model on 2 cores,
minutes at real size, and tens of seconds per decode step; a later process loads them.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import torch
import torch._dynamo
import torch._inductor.config
import torch.fx.experimental._config
import torch.nn.functional as F

from omni_core.fast import packages
from omni_core.fast.buckets import BUCKETS, bucket, buckets_up_to, chunks
from omni_core.models.code_predictor import GREEDY, CodePredictor, predict_kv, predict_reprefill
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import KVCache
from omni_core.models.sampling import TOP_K_ALTERNATIVES

# The decode steps: the code launching the kernels is C++, not Python, built apart from the kernels
# (a first compile ~20% shorter on 2 cores at the same speed).
OPTIONS = {"cpp_wrapper": True, "cpp_wrapper_build_separate": True, **packages.CPU_KERNELS}
# Predictors whose compiled batches run row by row through the 1-row frame. A re-prefill frame of B rows
# re-runs B x 1..16 positions per step, 15 steps unrolled: the largest graph there is, at 4 rows 6-11 minutes
# to build on 2 cores and far longer at 16 (a first `--compile` start at the app's max batch of 16 would spend
# most of an hour on them). Row by row, B rows cost B 1-row frames; the KV frames keep their buckets.
ROW_BY_ROW = ("reprefill",)


class Frame(torch.nn.Module):
    """One predictor frame as a module with tensor arguments only (what torch.export takes): the predictor's
    sampling, each row's noise [G-1, B, V], and which rows decode greedily [B] (every mix of rows)."""

    def __init__(self, cp: CodePredictor, fn):
        super().__init__()
        self.cp, self.fn = cp, fn

    def forward(self, h, e0, noise, greedy_rows):
        return self.fn(self.cp, h, e0, self.cp.sampling, noise=noise, greedy_rows=greedy_rows,
                       alternatives=TOP_K_ALTERNATIVES)


class GreedyFrame(Frame):
    """A frame whose rows all decode greedily: the argmax and the softmax, what `Frame` gives a greedy row."""

    def forward(self, h, e0):
        return self.fn(self.cp, h, e0, GREEDY, alternatives=TOP_K_ALTERNATIVES)


SAMPLINGS = {"greedy": GreedyFrame, "any": Frame}  # the frames per predictor and bucket, greedy first


class CompiledPredictors:
    """`predict_reprefill` and `predict_kv`, each compiled whole per batch bucket (one frame: 15 steps
    unrolled), twice (`SAMPLINGS`: a greedy-only frame and one for every mix), ahead of time into packages
    kept in the cache folder (packages.py): the first process compiles them, later ones load them in under
    a second."""

    FNS = {"reprefill": predict_reprefill, "kv": predict_kv}

    def __init__(self, cp: CodePredictor):
        self.cp = cp
        self.frames: dict[tuple, object] = {}  # (name, sampling, bucket, dtype, device) → the loaded package
        self.built = self.loaded = 0  # packages compiled by this object / read from the cache
        self.lock = threading.Lock()
        self._digest: str | None = None  # of the predictor's weights and plans (read-only once loaded)

    def run(self, name: str, h: torch.Tensor, e0: torch.Tensor, noise: torch.Tensor | None = None,
            greedy_rows: torch.Tensor | None = None):
        """The eager predictor `name`, rows padded to a bucket (or, ROW_BY_ROW, one row at a time): greedy
        for every row (noise None: the greedy-only frame), or with the predictor's sampling, `noise`
        [G-1, B, V] and `greedy_rows` [B] (the frame that serves every mix)."""
        B = h.shape[0]
        sampled = () if noise is None else (noise, greedy_rows)
        if name in ROW_BY_ROW and B > 1:  # each row through the 1-row frame: what it gets alone
            def row(b):
                return (noise[:, b:b + 1], greedy_rows[b:b + 1]) if sampled else ()

            rows = [self.run(name, h[b:b + 1], e0[b:b + 1], *row(b)) for b in range(B)]
            return tuple(torch.cat(parts) for parts in zip(*rows))
        size = bucket(B)
        if size is None:
            raise ValueError(f"{B} rows: a compiled predictor frame takes at most {BUCKETS[-1]} at once")
        pad = size - B
        args = [F.pad(h, (0, 0, 0, pad)), F.pad(e0, (0, 0, 0, pad))]  # zero rows; new contiguous tensors
        if sampled:
            args += [F.pad(noise, (0, 0, 0, pad), value=1.0).contiguous(), F.pad(greedy_rows, (0, pad), value=True)]
        out = self.frame(name, "any" if sampled else "greedy", size, h.dtype, h.device)(*args)
        return tuple(t[:B] for t in out)

    def frame(self, name: str, sampling: str, size: int, dtype: torch.dtype, device: torch.device, report=None):
        """The compiled frame for `size` rows (sampling: "greedy" or "any", `SAMPLINGS`): loaded once, from
        the cache folder, built there if missing. report(message): told what happens (a build takes a
        minute or more on 2 cores)."""
        what = (name, sampling, size, dtype, device)
        if what not in self.frames:
            with self.lock:  # one build at a time, and each only once
                if what not in self.frames:
                    self.frames[what] = self._load(*what, report or (lambda message: None))
        return self.frames[what]

    def path(self, name: str, sampling: str, size: int, dtype: torch.dtype, device: torch.device):
        """Where the package of this predictor's `name` frame for `size` rows lives (its name holds a digest
        of the predictor's weights and plans: another predictor of the same shapes has packages of its own)."""
        if self._digest is None:
            self._digest = packages.module_digest(self.cp)
        what = dict(fn=name, sampling=sampling, rows=size, dtype=dtype, device=device.type)
        return packages.folder() / packages.key(what, self._digest)

    def _load(self, name, sampling, size, dtype, device, report):
        path = self.path(name, sampling, size, dtype, device)
        rows = f"{size} row{'s' if size > 1 else ''}"
        what = f"the {name} predictor frame for {rows}, {'greedy' if sampling == 'greedy' else 'any sampling'}"
        started = time.perf_counter()
        if path.exists():
            try:
                frame = packages.load(path)
                self.loaded += 1
                report(f"{what}: loaded in {time.perf_counter() - started:.1f} s")
                return frame
            except Exception as exc:  # a damaged file: build it again
                report(f"{path.name} could not be loaded ({exc}); compiling it again")
        report(f"compiling {what} (a minute or more on 2 cores; kept in {path.parent} for the next start)")
        # The rotary table is built here, eagerly, so the traced frame reads a filled table cache.
        self.cp.model.rope.table(0, self.cp.num_code_groups + 1, device, dtype)
        module = SAMPLINGS[sampling](self.cp, self.FNS[name]).eval()
        packages.build(module, self.example(sampling, size, dtype, device), path)
        self.built += 1
        report(f"{what}: compiled in {time.perf_counter() - started:.0f} s")
        return packages.load(path)

    def example(self, sampling: str, size: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Arguments of a `size`-row frame (their shapes and dtypes are what a package takes)."""
        V, C, G = self.cp.lm_head[0].out_features, self.cp.embedding_dim, self.cp.num_code_groups
        h, e0 = (torch.zeros(size, C, dtype=dtype, device=device) for _ in range(2))  # two tensors, not one
        if sampling == "greedy":
            return h, e0
        noise = torch.ones(G - 1, size, V, device=device)
        return h, e0, noise, torch.ones(size, dtype=torch.bool, device=device)

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) every frame a batch of up to `max_rows` rows uses, greedy-only and for every mix:
        the KV predictor's per bucket, the re-prefill predictor's 1-row frame."""
        weight = self.cp.model.codec_embedding[0].weight  # its dtype and device (a head may be int8)
        for size in buckets_up_to(max_rows):
            for name in self.FNS:
                for sampling in SAMPLINGS:
                    if size == 1 or name not in ROW_BY_ROW:
                        self.frame(name, sampling, size, weight.dtype, weight.device, report)


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
        started = time.perf_counter()
        if path.exists():
            try:
                with open(path, "rb") as file:
                    step = torch.compiler.load_compiled_function(file, f_globals=globals(),
                                                                 external_data={"stack": self.stack})
                self.loaded += 1
                packages.touch(path)
                report(f"{what}: loaded in {time.perf_counter() - started:.1f} s")
                return step
            except Exception as exc:  # a damaged file, or one another torch wrote: build it again
                report(f"{path.name} could not be loaded ({exc}); compiling it again")
        report(f"compiling {what} (tens of seconds on 2 cores; kept in {path.parent} for the next start)")
        step = self._build(size, dtype, device)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            step.save_compiled_function(str(tmp), external_data={"stack": self.stack})
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        packages.prune(path.parent)
        self.built += 1
        report(f"{what}: compiled in {time.perf_counter() - started:.0f} s")
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

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) the step of every bucket a batch of up to `max_rows` rows uses."""
        like = self.stack.norm.weight
        for size in buckets_up_to(max_rows):
            self.step(size, like.dtype, like.device, report)


def compile_steps(stack: DecoderStack) -> CompiledSteps:
    """Give `stack` compiled decode steps (its decode_rows calls them); returns them.
    A loaded step's C++ is built again unless inductor's cache folder still holds it (~13 s a step on 2
    cores): unless TORCHINDUCTOR_CACHE_DIR says otherwise, that folder is the cache folder's "inductor"
    (kept like the steps), not torch's default in /tmp (gone at a reboot)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(packages.folder().parent / "inductor"))
    stack.rows_step = CompiledSteps(stack)
    return stack.rows_step
