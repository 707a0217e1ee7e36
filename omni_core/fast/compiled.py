"""torch.compile for the decode hot paths: `load_pipeline(..., compile=True)`.

Decoding a small model in eager PyTorch is bound by dispatch, not arithmetic: a tiny
predictor frame is ~400 ops of a few µs each, and at real size the norms, rotations
and attention between the matmuls still cost ~2 ms per step on a CPU. Inductor fuses
those chains into a few C++ loops and, with its C++ wrapper, launches the kernels
without Python in between. What is compiled:

- a whole frame of either code predictor (the 15 steps unrolled: fixed shapes for a
  batch bucket), with the sampling noise passed in, so a seed draws the codes eager draws;
  one graph serves greedy and sampled rows together (`greedy_rows`), and returns the codes'
  top-5 alternatives too;
  Its weights are frozen into the graph (they are read-only after loading): inductor
  then keeps float32 matmul weights pre-packed for MKL, which multiplies a batch of 16
  rows ~1.7x faster than the unpacked GEMM (measured: 122 vs 71 GFLOPS on 2 cores), at
  the cost of a packed copy of the predictor's weights per batch size;
- the one-token step of the thinker and of the talker (`DecoderStack.token_step`),
  with symbolic sizes, so the growing KV cache does not recompile it. The engine runs it
  once per request in a step (batch 1, as alone): batching rows through it would give
  other floats than a request gets alone.

Every pipeline compiles its own copies of these functions (`fresh`).

Eager is the reference; compiled must give the same codes (tests/test_compiled.py).
The first call for a shape compiles: tens of seconds for the tiny model on 2 cores,
minutes at real size (inductor's on-disk cache makes a second process quicker).
"""

from __future__ import annotations

import threading
import types

import torch
import torch._dynamo
import torch._inductor.config
import torch.nn.functional as F

from omni_core.fast.buckets import BUCKETS, bucket, buckets_up_to
from omni_core.models.code_predictor import CodePredictor, predict_kv, predict_reprefill
from omni_core.models.decoder import DecoderStack
from omni_core.models.sampling import TOP_K_ALTERNATIVES

# The code launching the kernels is C++, not Python; it is built apart from the kernels, which makes a
# tiny predictor frame's first compile ~20% shorter on 2 cores at the same speed (kernels unchanged).
OPTIONS = {"cpp_wrapper": True, "cpp_wrapper_build_separate": True}
# One graph per (predictor, batch bucket, dtype) and one step per stack; the benchmark's
# real-size sweep needs more than the default 8 per function, and would then run eager unnoticed.
# Set per compiled region, not in dynamo's process-wide config (which other code may change): in the
# batched engine the one-token step meets caches of several lengths and capacities in one step.
RECOMPILE_LIMIT = 64


def strict(compiled, what: str):
    """`compiled`, except that hitting its recompile limit raises an error that says so: dynamo's
    default is to fall back to eager without a word (speed, and bit-identity with solo runs, lost)."""

    def call(*args, **kwargs):
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            try:
                return compiled(*args, **kwargs)
            except torch._dynamo.exc.FailOnRecompileLimitHit as exc:
                raise RuntimeError(f"{what} hit torch.compile's recompile limit ({RECOMPILE_LIMIT} graphs): a shape "
                                   f"or type it was not warmed up for keeps changing; load without compile=True, "
                                   f"or report the shapes ({exc})") from exc

    return call


def fresh(fn):
    """A copy of `fn` with its own code object. Dynamo keeps its compiled graphs (and its
    recompile limit) per code object, so each pipeline compiling its own copy never sees
    another pipeline's graphs, frozen weights or guards."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


class CompiledPredictors:
    """`predict_reprefill` and `predict_kv`, each compiled whole (one graph per frame and bucket)."""

    def __init__(self, cp: CodePredictor):
        self.cp = cp
        self.fns = {name: strict(torch.compile(fresh(fn), fullgraph=True, dynamic=False, options=OPTIONS,
                                               recompile_limit=RECOMPILE_LIMIT), f"the compiled {name} predictor")
                    for name, fn in (("reprefill", predict_reprefill), ("kv", predict_kv))}
        self.compiled: set[tuple] = set()  # (name, bucket, dtype, device) seen
        self.lock = threading.Lock()

    def run(self, name: str, h: torch.Tensor, e0: torch.Tensor, noise: torch.Tensor, greedy_rows: torch.Tensor):
        """The eager predictor `name` with the predictor's sampling, `noise` [G-1, B, V] and `greedy_rows` [B]
        (greedy-only batches too: one graph serves every mix), rows padded to a bucket."""
        B = h.shape[0]
        size = bucket(B)
        if size is None:
            raise ValueError(f"{B} rows: a compiled predictor frame takes at most {BUCKETS[-1]} at once")
        pad = size - B
        h, e0 = F.pad(h, (0, 0, 0, pad)), F.pad(e0, (0, 0, 0, pad))  # zero rows; new contiguous tensors
        noise = F.pad(noise, (0, 0, 0, pad), value=1.0)
        greedy_rows = F.pad(greedy_rows, (0, pad), value=True)
        fn, key = self.fns[name], (name, size, h.dtype, h.device)
        if key in self.compiled:
            out = fn(self.cp, h, e0, self.cp.sampling, noise=noise, greedy_rows=greedy_rows,
                     alternatives=TOP_K_ALTERNATIVES)
        else:
            # The rotary table is built here, eagerly: dynamo guards on the table cache, and a table first
            # built inside the graph finds the cache filled at the next call, which compiles the frame again.
            self.cp.model.rope.table(0, self.cp.num_code_groups + 1, h.device, h.dtype)
            # The first call compiles. Freezing is process-wide config (passing it in torch.compile's
            # options changed nothing here), so it is set only for this call, one first call at a time.
            with self.lock, torch._inductor.config.patch(freezing=True):
                out = fn(self.cp, h, e0, self.cp.sampling, noise=noise, greedy_rows=greedy_rows,
                         alternatives=TOP_K_ALTERNATIVES)
            self.compiled.add(key)
        return tuple(t[:B] for t in out)

    def warm_up(self, max_rows: int) -> None:
        """Compile every bucket a batch of up to `max_rows` rows uses, for both predictors."""
        cp, weight = self.cp, self.cp.lm_head[0].weight
        V, C, G = weight.shape[0], cp.embedding_dim, cp.num_code_groups
        for size in buckets_up_to(max_rows):
            h, e0 = (torch.zeros(size, C, dtype=weight.dtype, device=weight.device) for _ in range(2))  # not one
            # tensor twice: dynamo would specialise the graph to the aliasing and compile again later
            noise = torch.ones(G - 1, size, V, device=weight.device)
            greedy = torch.ones(size, dtype=torch.bool, device=weight.device)
            for name in self.fns:
                self.run(name, h, e0, noise, greedy)


def compile_step(stack: DecoderStack) -> None:
    """Give `stack` a compiled one-token step (its forward uses it for T == 1 with a cache)."""

    def step(h, cos, sin, cache):
        return stack.run_layers(h, cos, sin, cache)

    stack.token_step = strict(torch.compile(fresh(step), fullgraph=True, dynamic=True, options=OPTIONS,
                                            recompile_limit=RECOMPILE_LIMIT), "the compiled one-token step")
