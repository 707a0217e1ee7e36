"""Compiled decoding of batches (compiled.py, compiled_steps.py): which units a batch runs, that each row of a
compiled frame or decode step gets what it gets alone, that compiled batches equal their solo runs, and
that compiled decoding really runs compiled. Apart from test_compiled.py so that the suite's two workers
compile the tiny model's frames and steps together, each half of them (`warm_up_backwards`)."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.profiler import profile

from omni_core import SpeechRequest
from tests.conftest import our_pipeline
from tests.test_compiled import STEPS_UP_TO_4, THREADS, compiled_pipeline, engine_threads, request


def compiled_tiny():
    """test_compiled.py's compiled tiny pipeline (max_batch 4, THREADS kernel threads, warmed up), its pieces
    loaded or built backwards."""
    return compiled_pipeline("tiny", backwards=True)


@pytest.fixture
def kernel_threads():
    """For a test that calls the compiled frames or steps directly: this thread on THREADS kernel threads, as
    the engine's thread runs them (`engine_threads`)."""
    with engine_threads():
        yield


@pytest.mark.parametrize("name", ["kv", "reprefill"])
def test_the_greedy_frame_gives_what_the_frame_for_every_mix_gives_a_greedy_row(name, kernel_threads):
    """A greedy request runs the greedy-only frame alone and the frame for every mix beside a sampled
    request: the same codes, probabilities, embeddings and top-5 either way (bit for bit: the app shows
    the probabilities, and a row's frame must not depend on its neighbours)."""
    frames = compiled_tiny().predictors.compiled
    cp, G = frames.cp, frames.cp.num_code_groups
    size = 1 if name == "reprefill" else 4
    torch.manual_seed(0)
    h, e0 = (torch.randn(size, cp.embedding_dim) for _ in range(2))
    greedy = frames.run(name, h, e0)
    noise = torch.empty(G - 1, size, cp.lm_head[0].weight.shape[0]).exponential_()
    mixed = frames.run(name, h, e0, noise, torch.ones(size, dtype=torch.bool))
    assert len(greedy) == len(mixed) == 5
    for got, want in zip(greedy, mixed):
        assert torch.equal(got, want)
    if size > 1:  # a sampled row beside them changes none of the greedy rows
        rows = torch.tensor([True, False] + [True] * (size - 2))
        beside = frames.run(name, h, e0, noise, rows)
        for got, want in zip(greedy, beside):
            assert torch.equal(got[rows], want[rows])
        assert not torch.equal(greedy[0][1], beside[0][1])  # the sampled row drew other codes


def test_each_row_of_a_compiled_kv_frame_gets_its_floats_alone(kernel_threads):
    """On the engine's 2 kernel threads, every row of a compiled KV frame of 4 rows (full, and 3 padded) equals
    its 1-row frame, floats included. Two things had broken it, each alone enough: ATen's attention kernel in
    the graph split a query's keys across the threads by the call's batch, and inductor split a lone row's
    softmax sum over the 2048 codes across the threads."""
    assert torch.get_num_threads() == THREADS == 2
    frames = compiled_tiny().predictors.compiled
    width = frames.cp.embedding_dim
    gen = torch.Generator().manual_seed(2)
    for rows in (4, 3, 4):
        h, e0 = torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)
        together = frames.run("kv", h, e0)
        for b in range(rows):
            alone = frames.run("kv", h[b:b + 1], e0[b:b + 1])
            for name, got, want in zip(("codes", "probs", "embeds", "top codes", "top probs"), together, alone):
                assert torch.equal(got[b:b + 1], want), f"row {b} of {rows}: its {name} differ from its frame alone"


def test_a_greedy_batch_runs_the_greedy_units_and_a_mixed_one_the_units_for_every_mix():
    """Which units the engine calls, and how often: the KV start once a frame and its step for the 14 others.
    Counted by wrapping the units."""
    pipe = compiled_tiny()
    frames, calls = pipe.predictors.compiled, collections.Counter()
    units = dict(frames.units)

    def counted(what, unit):
        def call(*args):
            calls[what[:3]] += 1
            return unit(*args)
        return call

    frames.units.update({what: counted(what, unit) for what, unit in units.items()})
    try:
        pipe.generate(SpeechRequest("Greedy.", predictor="kv", max_frames=3))
        assert calls == {("kv", "start", "greedy"): 3, ("kv", "step", "greedy"): 3 * 14}
        calls.clear()
        pipe.generate(SpeechRequest("Sampled.", predictor="kv", do_sample=True, seed=1, max_frames=3))
        assert calls == {("kv", "start", "any"): 3, ("kv", "step", "any"): 3 * 14}
    finally:
        frames.units.update(units)


def eager_op_calls(pipe, req, op: str) -> int:
    """Calls of `op` while `req` runs, profiled in the engine's thread (where the work is done)."""
    prof = profile()
    pipe.call(prof.__enter__)
    try:
        pipe.generate(req)
    finally:
        pipe.call(prof.__exit__, None, None, None)
    return sum(e.count for e in prof.key_averages() if e.key == op)


def test_compiled_decoding_really_runs_compiled():
    """The codes above would also match if compile silently fell back to eager; here the eager
    ops must be gone: decoding dispatches aten::rms_norm per layer per step, compiled fuses it."""
    req = request("kv", frames=24)
    compiled_tiny().generate(req)  # compiled by now
    eager = eager_op_calls(our_pipeline("tiny"), req, "aten::rms_norm")
    compiled = eager_op_calls(compiled_tiny(), req, "aten::rms_norm")
    assert eager > 24 * 15 * 2  # every predictor step of every frame, two layers
    assert compiled < eager / 20, (compiled, eager)  # what is left: the prefills


def test_concurrent_compiled_requests_equal_their_solo_runs():
    """The batched engine with compile=True: greedy and seeded requests, started while others are
    mid-utterance, each give exactly the codes they give alone (on this compiled pipeline)."""
    from tests.test_engine import MIX, assert_same, staggered

    pipe = compiled_tiny()
    requests = MIX[:6]
    solo = [pipe.generate(r) for r in requests]
    together = staggered(pipe, requests)
    for got, want in zip(together, solo):
        assert_same(got, want)
    assert max(r.stats.batch_max for r in together) >= 2


def test_one_compiled_decode_call_per_step_for_all_rows():
    """Compiled, the talker's decode step is one call for every row (padded to the bucket), never a call per
    row; staggered caches (other lengths and capacities in one call) run the same compiled step."""
    from tests.test_engine import collect

    pipe = compiled_tiny()
    talker = pipe.talker.model.rows_step
    calls, original = [], talker._bucket

    def recording(h, cos, sin, caches):
        calls.append(h.shape[0])
        return original(h, cos, sin, caches)

    talker._bucket = recording
    before = sum(s.built + s.loaded for s in pipe.steps)
    try:
        requests = [SpeechRequest(f"Row {i} speaks{'.' * 20 * i}", predictor="kv", max_frames=8, seed=i)
                    for i in range(3)]  # prompts of other lengths: caches of other lengths in one call
        results = [collect(s) for s in pipe.stream_together(requests)]
    finally:
        del talker._bucket
    assert all(r.stats.frames == 8 for r in results)
    assert calls == [3] * 7  # the first frame comes from the prefill: 7 decode steps, all 3 rows in each
    assert sum(s.built + s.loaded for s in pipe.steps) == before >= STEPS_UP_TO_4  # no variant compiled for them


@pytest.mark.parametrize("name", ["thinker", "talker"])
def test_each_row_of_a_compiled_step_gets_the_floats_it_gets_alone(name, kernel_threads):
    """The floats, not only the codes: every row of one compiled call for several rows (a full bucket, and
    one padded with a spare row) equals that row's call alone, bit for bit, with caches of other lengths.
    (Codes hide a last bit: inductor once computed the talker's [1, 1] shared-expert gate with scalar code
    alone and [N, 1] with vector code, and the codes stayed equal.)"""
    pipe = compiled_tiny()
    stack = getattr(pipe, name).model
    gen = torch.Generator().manual_seed(1)
    for rows in (4, 3) * 6:  # 42 rows: a last bit that differs only for some inputs must show
        caches = []
        for b in range(rows):
            cache = stack.new_cache(1, 16 + 8 * b, stack.norm.weight)
            cache.length = 5 + 3 * b
            for buf in cache.k + cache.v:
                buf[:, :, :cache.length] = torch.randn(buf[:, :, :cache.length].shape, generator=gen)
            caches.append(cache)
        h = torch.randn(rows, 1, stack.cfg.hidden_size, generator=gen)
        cos, sin = stack.row_tables(caches, h)
        together = stack.rows_step(h, cos, sin, caches)
        for b in range(rows):
            alone = stack.rows_step(h[b:b + 1], cos[b:b + 1], sin[b:b + 1], [caches[b]])
            assert torch.equal(together[b:b + 1], alone), f"{name}: row {b} of {rows} differs from its call alone"
    assert stack.rows_step.built + stack.rows_step.loaded >= 2  # buckets 1 and 4 (a variant each at least)


def test_a_call_that_no_variant_holds_is_never_run_by_one(kernel_threads):
    """A variant checks its guards at every call; every call the engine makes holds one's (a free slot after
    the new position, grad mode off). A call that none holds is refused by all of them (and compiled anew if
    it ever comes: units.py); through the stack, which reserves the slot first, the same call runs a variant
    there is."""
    pipe = compiled_tiny()
    stack = pipe.talker.model
    unit = stack.rows_step.unit(torch.float32, torch.device("cpu"))
    cache = stack.new_cache(1, 3, stack.norm.weight)
    cache.length = 2  # the new position fills the buffer: no free slot after it
    h = torch.zeros(1, 1, stack.cfg.hidden_size)
    cos, sin = stack.row_tables([cache], h)
    with torch.no_grad():
        args = (stack.layers[0], h, cos, sin, [cache.layer_view(0)])
        assert unit.variants and not any(variant.guard_check(*args) for variant in unit.variants)
        before = len(unit.variants)
        got = stack.rows_step(h, cos, sin, [cache])
        want = stack.layers_rows(h, cos, sin, [stack.new_cache(1, 8, stack.norm.weight)])
    assert len(unit.variants) == before and cache.k[0].shape[2] >= 4
    torch.testing.assert_close(got, want)
