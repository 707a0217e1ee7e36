"""CUDA-graph predictor == eager re-prefill (GPU only; skipped cleanly on CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from omni_core import SpeechRequest, load_pipeline
from omni_core.models.code_predictor import PREDICTOR_SAMPLING, predict_kv, predict_reprefill
from omni_core.fast.cuda_graph import GraphPredictor

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


def greedy(batch):
    """Noise and mask for rows that all decode greedily (one graph serves every mix)."""
    return torch.ones(15, batch, 2048, device="cuda"), torch.ones(batch, dtype=torch.bool, device="cuda")


@pytest.mark.parametrize("batch", [1, 2, 3, 4, 8, 16, 32])  # 3 uses bucket 4
def test_cuda_graph_equals_eager_greedy_for_every_bucket(gpu_pipe, batch):
    cp = gpu_pipe.talker.code_predictor
    graph = GraphPredictor(cp)
    h, e0 = inputs(gpu_pipe, batch)
    want = predict_reprefill(cp, h, e0)
    for _ in range(2):  # capture, then replay
        got = graph.run(h, e0, *greedy(batch))
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    assert torch.equal(got[0], predict_kv(cp, h, e0)[0])


def test_rows_past_every_bucket_run_in_bucket_chunks(gpu_pipe):
    """40 rows: the graph itself refuses them (it holds one bucket's rows); the engine's entry point
    (Predictors.run) runs them as a 32-row chunk and an 8-row one, each row as it runs eagerly.
    (The GPU check of 2026-12-04 found this case calling GraphPredictor.run, which raised.)"""
    from omni_core.fast.buckets import BUCKETS
    from omni_core.fast.predictors import Predictors

    cp = gpu_pipe.talker.code_predictor
    preds = Predictors(cp, torch.device("cuda"))
    h, e0 = inputs(gpu_pipe, 40)
    with pytest.raises(ValueError, match=f"at most {max(BUCKETS)} at once"):
        preds.graph.run(h, e0, *greedy(40))
    want = preds.run("reprefill", h, e0, [None] * 40, use_graph=False)
    for _ in range(2):  # capture, then replay
        got = preds.run("reprefill", h, e0, [None] * 40, use_graph=True)
        assert torch.equal(got[0], want[0])
        for a, b in zip(got[1:], want[1:]):
            torch.testing.assert_close(a, b)
    assert set(preds.graph.graphs) == {32, 8}


def test_cuda_graph_sampling_is_seeded_and_equals_eager(gpu_pipe):
    cp = gpu_pipe.talker.code_predictor
    graph = GraphPredictor(cp)
    h, e0 = inputs(gpu_pipe, 2)
    mixed = torch.tensor([False, True], device="cuda")  # row 1 decodes greedily

    def noise(seed):
        return cp.frame_noise(2, PREDICTOR_SAMPLING, torch.Generator(device="cuda").manual_seed(seed), "cuda")

    a = graph.run(h, e0, noise(5), mixed)[0]
    assert torch.equal(a, graph.run(h, e0, noise(5), mixed)[0])
    assert torch.equal(a, predict_reprefill(cp, h, e0, PREDICTOR_SAMPLING, noise=noise(5), greedy_rows=mixed)[0])
    assert torch.equal(a[1], predict_reprefill(cp, h[1:], e0[1:])[0][0])  # the greedy row
    assert not torch.equal(a[0], graph.run(h, e0, noise(6), mixed)[0][0])


def test_cuda_pipeline_with_graph_equals_without(gpu_pipe):
    request = SpeechRequest("Graphs on the GPU.", max_frames=12)
    on = gpu_pipe.generate(SpeechRequest(**{**request.__dict__, "cuda_graph": True}))
    off = gpu_pipe.generate(SpeechRequest(**{**request.__dict__, "cuda_graph": False}))
    assert on.stats.cuda_graph and not off.stats.cuda_graph
    np.testing.assert_array_equal(on.codes, off.codes)


def test_cuda_float32_gives_the_cpu_codes():
    request = SpeechRequest("The same on both devices.", predictor="kv", max_frames=12)
    cpu = load_pipeline("tiny", device="cpu", dtype="float32").generate(request)
    cuda = load_pipeline("tiny", device="cuda", dtype="float32").generate(request)
    np.testing.assert_array_equal(cuda.codes, cpu.codes)


def test_cuda_concurrent_requests_equal_their_solo_runs(gpu_pipe):
    """The batched engine on CUDA: each request equals its solo run (greedy and seeded), and the
    graph replays the bucket that fits the rows."""
    from tests.test_engine import MIX, staggered

    solo = [gpu_pipe.generate(r) for r in MIX]
    together = staggered(gpu_pipe, MIX)
    for got, want in zip(together, solo):
        np.testing.assert_array_equal(got.codes, want.codes)
    assert max(r.stats.batch_max for r in together) >= 2


def test_cuda_compare_mode_has_no_mismatch(gpu_pipe):
    result = gpu_pipe.generate(SpeechRequest("Compare on the GPU.", predictor="compare", max_frames=16))
    assert result.stats.mismatches == 0


def test_cuda_bfloat16_runs_and_reports_its_codes():
    pipe = load_pipeline("tiny", device="cuda", dtype="bfloat16")
    result = pipe.generate(SpeechRequest("Half precision on the GPU.", max_frames=10))
    print("bfloat16 CUDA codes:", result.codes.tolist())
    assert result.codes.shape == (10, 16)


def test_warm_up_captures_every_bucket_up_to_max_batch(gpu_pipe):
    """No bucket is captured while serving: warm-up captures them all."""
    from omni_core.fast.buckets import buckets_up_to

    gpu_pipe.warm_up()
    assert set(gpu_pipe.predictors.graph.graphs) == set(buckets_up_to(gpu_pipe.engine.max_batch))


def test_cuda_engine_thread_stays_when_idle(gpu_pipe, monkeypatch):
    """An idle engine's thread ends on a CPU only: on a GPU a new thread's first calls cost more (first audio
    201 against 71 ms, Qwen3-TTS 0.6B on an H200). Idle here for ten times the CPU's wait."""
    import time

    from omni_core.engine import threads
    monkeypatch.setattr(threads, "IDLE_EXIT_S", 0.2)
    gpu_pipe.generate(SpeechRequest("Then a pause.", max_frames=2))
    time.sleep(2.0)
    assert gpu_pipe.engine.has_thread


def test_a_cuda_pipeline_needs_its_warm_up(gpu_pipe):
    """app.py warms up a pipeline that needs it before serving: on CUDA, every graph bucket (captured while
    serving, they made the H200's first-audio p95 of 8 at once 1.81 s against 0.18 s)."""
    assert gpu_pipe.needs_warm_up
