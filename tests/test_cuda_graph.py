"""CUDA-graph predictor == eager re-prefill (GPU only; skipped cleanly on CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import SpeechRequest, load_pipeline
from omni_core.code_predictor import GREEDY, PREDICTOR_SAMPLING, predict_kv, predict_reprefill
from omni_core.cuda_graph import GraphPredictor

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")


@pytest.fixture(scope="module")
def gpu_pipe():
    return load_pipeline("tiny", device="cuda", dtype="float32")


def inputs(pipe, batch, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    C = pipe.config.predictor.hidden_size
    h = torch.randn(batch, C, generator=g, device="cuda")
    cb0 = torch.randint(0, 2048, (batch,), generator=g, device="cuda")
    return h, pipe.talker.model.codec_embedding(cb0)


@pytest.mark.parametrize("batch", [1, 3, 4, 16, 40])  # 3 uses bucket 4; 40 is past every bucket (eager)
def test_graph_equals_eager_greedy(gpu_pipe, batch):
    cp = gpu_pipe.talker.code_predictor
    graph = GraphPredictor(cp)
    h, e0 = inputs(gpu_pipe, batch)
    want = predict_reprefill(cp, h, e0)
    for _ in range(2):  # capture, then replay
        got = graph.run(h, e0, GREEDY)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    assert torch.equal(got[0], predict_kv(cp, h, e0)[0])


def test_graph_sampling_is_seeded_and_equals_eager(gpu_pipe):
    cp = gpu_pipe.talker.code_predictor
    graph = GraphPredictor(cp)
    h, e0 = inputs(gpu_pipe, 2)

    def run(fn, seed):
        return fn(h, e0, PREDICTOR_SAMPLING, torch.Generator(device="cuda").manual_seed(seed))[0]

    eager = lambda *a: predict_reprefill(cp, *a)  # noqa: E731
    a = run(graph.run, 5)
    assert torch.equal(a, run(graph.run, 5))
    assert torch.equal(a, run(eager, 5))
    assert not torch.equal(a, run(graph.run, 6))


def test_pipeline_with_graph_equals_without(gpu_pipe):
    request = SpeechRequest("Graphs on the GPU.", max_frames=12)
    on = gpu_pipe.generate(SpeechRequest(**{**request.__dict__, "cuda_graph": True}))
    off = gpu_pipe.generate(SpeechRequest(**{**request.__dict__, "cuda_graph": False}))
    assert on.stats.cuda_graph and not off.stats.cuda_graph
    np.testing.assert_array_equal(on.codes, off.codes)
