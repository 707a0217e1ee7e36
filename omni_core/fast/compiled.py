"""Compiled code predictor frames: `load_pipeline(..., compile=True)` (the decode steps: compiled_steps.py).

Decoding a small model in eager PyTorch is bound by dispatch, not arithmetic: a tiny predictor frame is
some 400 ops of a few µs each. Inductor fuses those chains into a few C++ loops and, with its C++ wrapper,
launches the kernels without Python in between. What is compiled here is a whole frame of either code
predictor (the 15 steps unrolled: fixed shapes for a batch bucket; the re-prefill predictor at 1 row
only, its batches row by row: ROW_BY_ROW), with the sampling noise passed in, so a seed draws the codes
eager draws; one graph serves greedy and sampled rows together (`greedy_rows`), and returns the codes'
top-5 alternatives too; a second, greedy-only graph serves batches whose rows all decode greedily (the
default request): no noise, no top-k or top-p over the vocabulary.

Its weights are frozen into the graph (they are read-only after loading): inductor then keeps float32
matmul weights pre-packed for MKL, which multiplies a batch of rows faster than the unpacked GEMM, at the
cost of a packed copy of the predictor's weights per batch size. The frames are compiled ahead of time
(AOTInductor) into packages kept in the cache folder (packages.py): the first start compiles them (a
minute or more per frame on 2 cores), a later one loads them. A predictor's packages are its own (their
names hold a digest of its weights and plans).

Eager is the reference; compiled must give the same codes (tests/test_compiled.py). The figures:
BENCHMARKS.md, "Compiled start-up", and docs/benchmarks-history.md (j), (n).
"""

from __future__ import annotations

import functools
import threading

import torch
import torch._inductor.config  # packages.build and load use torch._inductor
import torch.nn.functional as F

from omni_core.fast import packages
from omni_core.fast.buckets import BUCKETS, bucket, buckets_up_to
from omni_core.models.code_predictor import GREEDY, CodePredictor, predict_kv, predict_reprefill
from omni_core.models.sampling import TOP_K_ALTERNATIVES

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

        def build():
            # The rotary table is built here, eagerly, so the traced frame reads a filled table cache.
            self.cp.model.rope.table(0, self.cp.num_code_groups + 1, device, dtype)
            module = SAMPLINGS[sampling](self.cp, self.FNS[name]).eval()
            packages.build(module, self.example(sampling, size, dtype, device), path)
            return packages.load(path)

        frame, built = packages.read_or_build(path, what, packages.load, build, report, "a minute or more on 2 cores")
        self.built += built
        self.loaded += not built
        return frame

    def example(self, sampling: str, size: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Arguments of a `size`-row frame (their shapes and dtypes are what a package takes)."""
        V, C, G = self.cp.lm_head[0].out_features, self.cp.embedding_dim, self.cp.num_code_groups
        h, e0 = (torch.zeros(size, C, dtype=dtype, device=device) for _ in range(2))  # two tensors, not one
        if sampling == "greedy":
            return h, e0
        noise = torch.ones(G - 1, size, V, device=device)
        return h, e0, noise, torch.ones(size, dtype=torch.bool, device=device)

    def pieces(self, max_rows: int) -> list:
        """What `warm_up` loads or builds, in its order: a call per frame (taking report) that a batch of up to
        `max_rows` rows uses, greedy-only and for every mix: the KV predictor's per bucket, the re-prefill
        predictor's 1-row frame."""
        weight = self.cp.model.codec_embedding[0].weight  # its dtype and device (a head may be int8)
        return [functools.partial(self.frame, name, sampling, size, weight.dtype, weight.device)
                for size in buckets_up_to(max_rows) for name in self.FNS for sampling in SAMPLINGS
                if size == 1 or name not in ROW_BY_ROW]

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) every frame a batch of up to `max_rows` rows uses (`pieces`)."""
        for piece in self.pieces(max_rows):
            piece(report)
