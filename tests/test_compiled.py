"""Compiled decoding (compiled.py, packages.py) against eager, which is the reference (it equals HF:
test_pipeline.py). The first request of each kind compiles (about a minute on a fresh machine); the
predictor frames are kept as packages in the cache folder, which a second process loads."""

from __future__ import annotations

import collections
import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters
from torch.profiler import profile

from omni_core import SpeechRequest, load_pipeline
from omni_core.fast.buckets import buckets_up_to
from tests.conftest import our_pipeline


WARM_UP_GRAPHS: dict[str, int] = {}  # preset → graphs dynamo compiled while it warmed up, less what it built


@functools.lru_cache(maxsize=None)
def compiled_pipeline(preset: str):
    """One compiled pipeline per preset for the whole session (each graph compiles for a minute or more).
    At most 4 requests per step: buckets 1 and 4. 'tiny' is warmed up at once, as `app.py --compile`
    does: every path compiled before its first request (which test_after_warm_up_nothing_compiles_again
    holds it to, and which the other tests then reuse)."""
    pipe = load_pipeline(preset, device="cpu", compile=True, max_batch=4)
    if preset == "tiny":
        before = counters["stats"]["unique_graphs"]
        pipe.warm_up()
        built = pipe.predictors.compiled.built + sum(steps.built for steps in pipe.steps)
        WARM_UP_GRAPHS[preset] = counters["stats"]["unique_graphs"] - before - built
    return pipe


# The KV frame per bucket, the re-prefill frame at 1 row (ROW_BY_ROW); each greedy-only and for every mix
FRAMES_UP_TO_4 = 2 * (len(buckets_up_to(4)) + 1)
STEPS_UP_TO_4 = 2 * len(buckets_up_to(4))  # the thinker's and the talker's decode step per bucket
FRAMES = 70  # past the talker cache's first capacity (prompt + 64): it grows inside the compiled step


def request(predictor: str, do_sample: bool = False, frames: int = FRAMES) -> SpeechRequest:
    return SpeechRequest("Tell me about the sea.", mode="chat", predictor=predictor, do_sample=do_sample, seed=3,
                         max_frames=frames, max_text_tokens=8)


def test_after_warm_up_nothing_compiles_again():
    """warm_up() compiles every path a request takes, so no user request waits for the compiler:
    not a longer reply, not a talker cache that grows, not speak mode. First in this file, so that
    no other test's request has compiled anything the warm-up missed."""
    pipe = compiled_pipeline("tiny")  # warmed up when it was made, before any request
    # The KV frame once per bucket (1, 4) and the re-prefill frame at 1 row, each greedy-only and for every
    # mix, and each stack's decode step per bucket, built or loaded; nothing else compiled (a rotary table
    # first built inside a graph once made the warm-up's first request compile again).
    frames = pipe.predictors.compiled

    def made():
        return (frames.built + frames.loaded, sum(s.built + s.loaded for s in pipe.steps),
                counters["stats"]["unique_graphs"])

    before = made()
    assert before[:2] == (FRAMES_UP_TO_4, STEPS_UP_TO_4) and WARM_UP_GRAPHS["tiny"] == 0
    for mode, predictor in (("chat", "kv"), ("speak", "reprefill")):
        pipe.generate(SpeechRequest("A longer request than the warm-up.", mode=mode, predictor=predictor,
                                    max_frames=100, max_text_tokens=12))
    assert made() == before


@pytest.mark.parametrize("predictor,do_sample", [("kv", False), ("reprefill", False), ("kv", True)])
def test_compiled_gives_the_eager_codes(predictor, do_sample):
    req = request(predictor, do_sample)
    got, want = compiled_pipeline("tiny").generate(req), our_pipeline("tiny").generate(req)
    assert got.text_ids == want.text_ids
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_allclose(got.audio, want.audio, rtol=0, atol=1e-5)
    assert got.stats.frames == FRAMES


@pytest.mark.parametrize("name", ["kv", "reprefill"])
def test_the_greedy_frame_gives_what_the_frame_for_every_mix_gives_a_greedy_row(name):
    """A greedy request runs the greedy-only frame alone and the frame for every mix beside a sampled
    request: the same codes, probabilities, embeddings and top-5 either way (bit for bit: the app shows
    the probabilities, and a row's frame must not depend on its neighbours)."""
    frames = compiled_pipeline("tiny").predictors.compiled
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


def test_a_greedy_batch_runs_the_greedy_frame_and_a_mixed_one_the_frame_for_every_mix():
    """Which package the engine calls: counted by wrapping the loaded frames."""
    pipe = compiled_pipeline("tiny")
    frames, calls = pipe.predictors.compiled, collections.Counter()
    loaded = dict(frames.frames)

    def counted(what, run):
        def call(*args):
            calls[what[:2]] += 1
            return run(*args)
        return call

    frames.frames.update({what: counted(what, run) for what, run in loaded.items()})
    try:
        pipe.generate(SpeechRequest("Greedy.", predictor="kv", max_frames=3))
        assert calls == {("kv", "greedy"): 3}
        calls.clear()
        pipe.generate(SpeechRequest("Sampled.", predictor="kv", do_sample=True, seed=1, max_frames=3))
        assert calls == {("kv", "any"): 3}
    finally:
        frames.frames.update(loaded)


def test_compare_mode_compiled_has_no_mismatch():
    result = compiled_pipeline("tiny").generate(request("compare", frames=24))
    assert result.stats.mismatches == 0 and result.stats.frames == 24


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
    compiled_pipeline("tiny").generate(req)  # compiled by now
    eager = eager_op_calls(our_pipeline("tiny"), req, "aten::rms_norm")
    compiled = eager_op_calls(compiled_pipeline("tiny"), req, "aten::rms_norm")
    assert eager > 24 * 15 * 2  # every predictor step of every frame, two layers
    assert compiled < eager / 20, (compiled, eager)  # what is left: the prefills


def test_pipeline_info_says_compiled():
    assert compiled_pipeline("tiny").info["compiled"] is True
    assert our_pipeline("tiny").info["compiled"] is False


def test_a_second_predictor_of_the_same_shapes_looks_for_packages_of_its_own():
    """Weights are frozen into a frame, so a second predictor of the same shapes must not load the first
    one's packages: the frames it would use have other names (a digest of its weights), and none of them
    is a package the first one built or loaded. (That a package computes with the weights it was built
    from, and another of the same shapes with its own: test_packages.py, on a module that builds in
    seconds; a predictor frame takes minutes here.)"""
    from omni_core.fast.compiled import CompiledPredictors

    pipe = compiled_pipeline("tiny")  # built or loaded every frame of buckets 1 and 4 (re-prefill: 1)
    first = pipe.predictors.compiled
    second = copy.deepcopy(first.cp)
    for head in second.lm_head:
        head.weight.data = head.weight.data.flip(0)  # other codes, same shapes
    weight = first.cp.lm_head[0].weight
    frames = [what[:3] for what in first.frames]
    assert sorted(frames) == sorted((name, sampling, size) for name, size in (("kv", 1), ("kv", 4), ("reprefill", 1))
                                    for sampling in ("any", "greedy"))
    ours = {first.path(*what, weight.dtype, weight.device) for what in frames}
    theirs = {CompiledPredictors(second).path(*what, weight.dtype, weight.device) for what in frames}
    assert len(ours) == len(frames) and all(path.exists() for path in ours) and not ours & theirs
    same = copy.deepcopy(first.cp)  # equal weights: the same packages (a second start finds them)
    assert {CompiledPredictors(same).path(*what, weight.dtype, weight.device) for what in frames} == ours


SECOND_START = """
import json, sys, time
from omni_core import SpeechRequest, load_pipeline
started = time.perf_counter()
pipe = load_pipeline("tiny", device="cpu", compile=True, max_batch=4, threads=1)
pipe.warm_up(lambda message: print(message, file=sys.stderr))
ready = time.perf_counter() - started
request = SpeechRequest(**json.loads(sys.argv[1]))
codes = pipe.generate(request).codes.tolist()
frames = pipe.predictors.compiled
print(json.dumps(dict(built=frames.built, loaded=frames.loaded, ready_s=ready, codes=codes,
                      steps_built=sum(s.built for s in pipe.steps), steps_loaded=sum(s.loaded for s in pipe.steps))))
pipe.close()
"""


def test_a_second_process_loads_the_compiled_frames_instead_of_compiling():
    """The frames and decode steps this process compiled are kept in the cache folder: a new process with
    the same model builds none, loads every one, and decodes the same codes."""
    pipe = compiled_pipeline("tiny")  # built or loaded every frame of buckets 1 and 4 (re-prefill: 1)
    args = dict(text="Tell me about the sea.", mode="chat", predictor="kv", seed=3, max_frames=24, max_text_tokens=8)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", SECOND_START, json.dumps(args)], capture_output=True, text=True,
                          timeout=600, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.strip().splitlines()[-1])
    said = done.stderr[-3000:]  # what the warm-up reported
    assert (second["built"], second["loaded"]) == (0, FRAMES_UP_TO_4), said
    assert (second["steps_built"], second["steps_loaded"]) == (0, STEPS_UP_TO_4), said
    np.testing.assert_array_equal(np.array(second["codes"]), pipe.generate(SpeechRequest(**args)).codes)
    print(f"second start with compile=True ready in {second['ready_s']:.1f} s")


def test_concurrent_compiled_requests_equal_their_solo_runs():
    """The batched engine with compile=True: greedy and seeded requests, started while others are
    mid-utterance, each give exactly the codes they give alone (on this compiled pipeline)."""
    from tests.test_engine import MIX, assert_same, staggered

    pipe = compiled_pipeline("tiny")
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

    pipe = compiled_pipeline("tiny")
    talker = pipe.talker.model.rows_step
    calls, original = [], talker._bucket

    def recording(h, cos, sin, caches):
        calls.append(h.shape[0])
        return original(h, cos, sin, caches)

    talker._bucket = recording
    try:
        requests = [SpeechRequest(f"Row {i} speaks{'.' * 20 * i}", predictor="kv", max_frames=8, seed=i)
                    for i in range(3)]  # prompts of other lengths: caches of other lengths in one call
        results = [collect(s) for s in pipe.stream_together(requests)]
    finally:
        del talker._bucket
    assert all(r.stats.frames == 8 for r in results)
    assert calls == [3] * 7  # the first frame comes from the prefill: 7 decode steps, all 3 rows in each
    assert sum(s.built + s.loaded for s in pipe.steps) == STEPS_UP_TO_4


@pytest.mark.parametrize("name", ["thinker", "talker"])
def test_each_row_of_a_compiled_step_gets_the_floats_it_gets_alone(name):
    """The floats, not only the codes: every row of one compiled call for several rows (a full bucket, and
    one padded with a spare row) equals that row's call alone, bit for bit, with caches of other lengths.
    (Codes hide a last bit: inductor once computed the talker's [1, 1] shared-expert gate with scalar code
    alone and [N, 1] with vector code, and the codes stayed equal.)"""
    pipe = compiled_pipeline("tiny")
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
    cpu = torch.device("cpu")
    assert stack.rows_step.steps.keys() >= {(1, torch.float32, cpu), (4, torch.float32, cpu)}


def test_a_step_whose_guards_refuse_a_call_says_so():
    """A loaded step checks its guards at every call; every call the engine makes holds them (a free slot
    after the new position, grad mode off). A call that does not is refused with an error, never run."""
    pipe = compiled_pipeline("tiny")
    stack = pipe.talker.model
    step = stack.rows_step.step(1, torch.float32, torch.device("cpu"))
    cache = stack.new_cache(1, 3, stack.norm.weight)
    cache.length = 2  # the new position fills the buffer: no free slot after it
    h = torch.zeros(1, 1, stack.cfg.hidden_size)
    cos, sin = stack.row_tables([cache], h)
    with torch.no_grad(), pytest.raises(RuntimeError, match="Guard"):
        step(h, cos, sin, [cache])
    with torch.no_grad():  # the same call through the stack: it reserves the slot first
        got = stack.rows_step(h, cos, sin, [cache])
        want = stack.layers_rows(h, cos, sin, [stack.new_cache(1, 8, stack.norm.weight)])
    assert got.shape == want.shape and cache.k[0].shape[2] >= 4
