"""torch.compile for the decode hot paths: `load_pipeline(..., compile=True)`.

Decoding a small model in eager PyTorch is bound by dispatch, not arithmetic: a tiny
predictor frame is ~400 ops of a few µs each, and at real size the norms, rotations
and attention between the matmuls still cost ~2 ms per step on a CPU. Inductor fuses
those chains into a few C++ loops and, with its C++ wrapper, launches the kernels
without Python in between. What is compiled:

- a whole frame of either code predictor (the 15 steps unrolled: fixed shapes for a
  batch size), with the sampling noise passed in, so a seed draws the codes eager draws.
  Its weights are frozen into the graph (they are read-only after loading): inductor
  then keeps float32 matmul weights pre-packed for MKL, which multiplies a batch of 16
  rows ~1.7x faster than the unpacked GEMM (measured: 122 vs 71 GFLOPS on 2 cores), at
  the cost of a packed copy of the predictor's weights per batch size;
- the one-token step of the thinker and of the talker (`DecoderStack.compiled_step`),
  with symbolic sizes, so the growing KV cache does not recompile it.

Eager is the reference; compiled must give the same codes (tests/test_compiled.py).
The first call for a shape compiles: tens of seconds for the tiny model on 2 cores,
minutes at real size (inductor's on-disk cache makes a second process quicker).
Dynamo compiles under its own global lock, so concurrent requests are safe.
"""

from __future__ import annotations

import threading

import torch
import torch._dynamo
import torch._inductor.config

from .code_predictor import CodePredictor, predict_kv, predict_reprefill
from .layers import DecoderStack
from .sampling import SamplingConfig

OPTIONS = {"cpp_wrapper": True}  # the code launching the kernels is C++, not Python
# One graph per (predictor, sampling, batch, dtype): the default limit of 8 per function
# is too few for the benchmark's real-size sweep, which would then run eager unnoticed.
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)


class CompiledPredictors:
    """`predict_reprefill` and `predict_kv`, each compiled whole (one graph per frame)."""

    def __init__(self, cp: CodePredictor):
        self.cp = cp
        self.fns = {name: torch.compile(fn, fullgraph=True, dynamic=False, options=OPTIONS)
                    for name, fn in (("reprefill", predict_reprefill), ("kv", predict_kv))}
        self.compiled: set[tuple] = set()  # (name, sampling, shape, dtype, device) seen
        self.lock = threading.Lock()

    def run(self, name: str, h: torch.Tensor, e0: torch.Tensor, sampling: SamplingConfig,
            generator: torch.Generator | None = None):
        """Same contract as the eager predictor `name`; the noise is drawn here, outside the graph."""
        noise = self.cp.frame_noise(h.shape[0], sampling, generator, h.device)
        h = h.clone(memory_format=torch.contiguous_format)  # a graph is specialised to its inputs' strides
        fn, key = self.fns[name], (name, sampling, tuple(h.shape), h.dtype, h.device)
        if key in self.compiled:
            return fn(self.cp, h, e0, sampling, noise=noise)
        # The first call compiles. Freezing is process-wide config (passing it in torch.compile's
        # options changed nothing here), so it is set only for this call, one first call at a time.
        with self.lock, torch._inductor.config.patch(freezing=True):
            out = fn(self.cp, h, e0, sampling, noise=noise)
        self.compiled.add(key)
        return out


def compile_step(stack: DecoderStack) -> None:
    """Give `stack` a compiled one-token step (its forward uses it for T == 1 with a cache)."""

    def step(h, cos, sin, cache):
        return stack.run_layers(h, cos, sin, cache)[0]

    stack.compiled_step = torch.compile(step, fullgraph=True, dynamic=True, options=OPTIONS)
