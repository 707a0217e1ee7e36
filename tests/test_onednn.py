"""The oneDNN plan (models/onednn.py) inside the engine: requests run together equal their solo runs.

At real widths on this project's EPYC the plans choose oneDNN for float32 (BENCHMARKS.md (l)); the tiny
model's weights are too small to be timed, so here every matmul of a tiny pipeline where oneDNN holds is
given it, and the engine's batch-invariance test runs on it, at 1 thread and at 2."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from omni_core import load_pipeline
from omni_core.models.invariant import ONEDNN, Linear, holds

from .test_engine import MIX, assert_same, staggered

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")


@pytest.fixture(scope="module")
def pipe():
    with load_pipeline("tiny", device="cpu") as pipe:
        linears = [m for root in (pipe.thinker, pipe.talker) for m in root.modules() if isinstance(m, Linear)]
        taken = [m for m in linears if m.weight.shape[0] > 1 and holds(ONEDNN, m.weight, m.bias)]
        for m in taken:
            m.set_plan(ONEDNN)
        assert len(taken) > len(linears) // 2, f"oneDNN held for {len(taken)} of {len(linears)} matmuls"
        yield pipe


@pytest.mark.parametrize("threads", [1, 2])
def test_requests_together_equal_their_solo_runs_on_onednn(pipe, threads):
    before = pipe.engine.threads
    pipe.engine.threads = threads
    pipe.call(torch.set_num_threads, threads)  # the engine's thread runs the kernels
    try:
        for m in pipe.talker.modules():  # it holds at this thread count too, in the thread that runs the kernels
            if isinstance(m, Linear) and m.plan == ONEDNN:
                assert pipe.call(holds, ONEDNN, m.weight, m.bias), tuple(m.weight.shape)
        requests = [dataclasses.replace(r, max_frames=6) for r in MIX[:6]]
        solo = [pipe.generate(r) for r in requests]
        together = staggered(pipe, requests, after_frames=2)
    finally:
        pipe.engine.threads = before
        pipe.call(torch.set_num_threads, before)
    for got, want in zip(together, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in together) >= 2


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
