"""The matmul plans' kernels inside the engine (models/invariant.py, omni_core/planner/): requests run together equal their
solo runs, at 1 thread and at 2.

- one thread (Kernel.SERIAL): the tiny model's own plans, chosen at the tests' 1 thread and run in an engine
  thread of 2 (every small GEMM switches to one thread and back);
- oneDNN (models/onednn.py): at real widths on this project's EPYC the plans choose it for float32
  (docs/benchmarks-history.md (l)); the tiny weights are too small for it, so every matmul of a tiny pipeline where
  it holds is given it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from omni_core import load_pipeline
from omni_core.models.invariant import ONEDNN, Kernel, Linear
from omni_core.planner.probe import holds

from .conftest import our_pipeline
from .test_engine import MIX, assert_same, staggered

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")


@pytest.fixture(scope="module")
def onednn_pipe():
    with load_pipeline("tiny", device="cpu") as pipe:
        linears = [m for root in (pipe.thinker, pipe.talker) for m in root.modules() if isinstance(m, Linear)]
        taken = [m for m in linears if m.weight.shape[0] > 1 and holds(ONEDNN, m.weight, m.bias)]
        for m in taken:
            m.set_plan(ONEDNN)
        assert len(taken) > len(linears) // 2, f"oneDNN held for {len(taken)} of {len(linears)} matmuls"
        yield pipe


def together_and_solo(pipe, threads: int, kernel: Kernel):
    """6 staggered requests and each one alone, with the engine's thread at `threads`."""
    before = pipe.engine.threads
    pipe.engine.threads = threads
    pipe.call(torch.set_num_threads, threads)  # the engine's thread runs the kernels
    try:
        for m in pipe.talker.modules():  # it holds at this thread count too, in the thread that runs the kernels
            if isinstance(m, Linear) and m.plan.kernel is kernel:
                assert pipe.call(holds, m.plan, m.weight, m.bias, 0, m.packed), tuple(m.weight.shape)
        requests = [dataclasses.replace(r, max_frames=6) for r in MIX[:6]]
        solo = [pipe.generate(r) for r in requests]
        together = staggered(pipe, requests, after_frames=2)
    finally:
        pipe.engine.threads = before
        pipe.call(torch.set_num_threads, before)
    for got, want in zip(together, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in together) >= 2


@pytest.mark.parametrize("threads", [1, 2])
def test_requests_together_equal_their_solo_runs_on_one_thread_plans(threads):
    pipe = our_pipeline("tiny")
    linears = [m for root in (pipe.thinker, pipe.talker) for m in root.modules() if isinstance(m, Linear)]
    assert sum(m.plan.kernel is Kernel.SERIAL for m in linears) > len(linears) // 2, [m.plan for m in linears]
    together_and_solo(pipe, threads, Kernel.SERIAL)
    assert torch.get_num_threads() == 1  # the test's own thread is as it was


@needs_onednn
@pytest.mark.parametrize("threads", [1, 2])
def test_requests_together_equal_their_solo_runs_on_onednn(onednn_pipe, threads):
    together_and_solo(onednn_pipe, threads, Kernel.ONEDNN)


@needs_onednn
def test_a_module_on_onednn_copies_and_pickles():
    """The packed weight is opaque (no storage): a copy or a pickle packs it again from the weight."""
    import copy
    import io

    m = Linear(1024, 4096, bias=True)
    m.set_plan(ONEDNN)
    x = torch.randn(3, 1024)
    buffer = io.BytesIO()
    torch.save(m, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(m), torch.load(buffer, weights_only=False)):
        assert other.plan == ONEDNN and other.packed is not None
        assert torch.equal(other(x), m(x))
