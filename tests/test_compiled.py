"""Compiled decoding (compiled.py, compiled_steps.py, units.py) against eager, which is the reference (it equals
HF: test_pipeline.py). The warm-up compiles the units (a predictor step, a decoder layer) once; they are kept in
the cache folder, which a second process reads. (Compiled batches: test_compiled_batches.py, which shares this
file's pipeline and the compiling of its pieces.)"""

from __future__ import annotations

import contextlib
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

from omni_core import SpeechRequest, load_pipeline
from omni_core.engine.sequence import Sequence
from omni_core.events import Done
from omni_core.fast.buckets import buckets_up_to
from tests.conftest import our_pipeline


# The kernel threads of every compiled pipeline here: a Space's engine runs on every core (2 on a free CPU Space),
# and a unit is built for its kernel threads (packages.key), so one thread count builds each unit once.
THREADS = 2
WARM_UP_GRAPHS: dict[tuple, int] = {}  # (preset, backwards) → graphs dynamo compiled while it warmed up, less what it built


@contextlib.contextmanager
def engine_threads():
    """This thread's kernels on the compiled pipelines' THREADS while a test calls their units directly,
    as the engine's thread runs them (a unit's name holds the threads it was built for). Not around loading
    an eager pipeline: it would get the calling thread's threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def compiled_pipeline(preset: str, backwards: bool = False):
    """One compiled pipeline per preset for the whole session (its units compile for a minute in all).
    At most 4 requests per step: buckets 1 and 4. 'tiny' is warmed up at once, as `app.py --compile`
    does: every path compiled before its first request (which test_after_warm_up_nothing_compiles_again
    holds it to, and which the other tests then reuse). backwards: test_compiled_batches.py's, which first
    builds the units in the opposite order (`warm_up_backwards`)."""
    pipe = load_pipeline(preset, device="cpu", compile=True, max_batch=4, threads=THREADS)
    if preset == "tiny":
        report = functools.partial(print, f"{preset} warm-up{' backwards' if backwards else ''}:", file=sys.stderr)
        before = counters["stats"]["unique_graphs"]
        if backwards:
            warm_up_backwards(pipe, report)
        pipe.warm_up(report)  # what it compiled or loaded, and how long each took (pytest -s shows it)
        built = pipe.predictors.compiled.built + sum(steps.built for steps in pipe.steps)
        WARM_UP_GRAPHS[preset, backwards] = counters["stats"]["unique_graphs"] - before - built
    return pipe


def warm_up_backwards(pipe, report) -> None:
    """Load or build the units `warm_up` does, in the opposite order. The suite's two workers start
    test_compiled.py and test_compiled_batches.py together, cold: each builds the units the other builds last,
    and waits for and loads those the other is building (packages.building), so the two split the compiling
    between them instead of each doing all of it."""
    frames = [torch.no_grad()(frame) for frame in pipe.predictors.compiled.pieces(4)]  # as Pipeline.warm_up
    for piece in reversed(frames + [step for steps in pipe.steps for step in steps.pieces(4)]):
        pipe.call(piece, report)


# The KV predictor's start and step and the re-prefill predictor's step, each greedy-only and for every mix
PREDICTOR_UNITS = 6
STEPS_UP_TO_4 = 2 * len(buckets_up_to(4))  # the warm-up's pieces: the thinker's and the talker's layer per bucket
FRAMES = 70  # past the talker cache's first capacity (prompt + 64): it grows inside the compiled step


def request(predictor: str, do_sample: bool = False, frames: int = FRAMES) -> SpeechRequest:
    # Seed 4: its sampled take runs all FRAMES frames (seed 3's draws the codec's EOS at frame 57), so the
    # talker cache grows inside the compiled step on the sampled path too.
    return SpeechRequest("Tell me about the sea.", mode="chat", predictor=predictor, do_sample=do_sample, seed=4,
                         max_frames=frames, max_text_tokens=8)


def test_after_warm_up_nothing_compiles_again():
    """warm_up() compiles every path a request takes, so no user request waits for the compiler:
    not a longer reply, not a talker cache that grows, not speak mode, not a batch. First in this file, so
    that no other test's request has compiled anything the warm-up missed."""
    pipe = compiled_pipeline("tiny")  # warmed up when it was made, before any request
    # Every unit built or loaded (the predictor's six; the thinker's and the talker's layer, a variant per
    # bucket at least), and nothing compiled but them (a rotary table first built inside a graph once made the
    # warm-up's first request compile again).
    frames = pipe.predictors.compiled

    def made():
        return (frames.built + frames.loaded, sum(s.built + s.loaded for s in pipe.steps),
                counters["stats"]["unique_graphs"])

    before = made()
    assert len(frames.units) == PREDICTOR_UNITS and all(unit.variants for unit in frames.units.values())
    assert before[1] >= STEPS_UP_TO_4 and WARM_UP_GRAPHS["tiny", False] == 0
    for mode, predictor in (("chat", "kv"), ("speak", "reprefill")):
        pipe.generate(SpeechRequest("A longer request than the warm-up.", mode=mode, predictor=predictor,
                                    max_frames=100, max_text_tokens=12))
    from tests.test_engine import MIX, staggered
    staggered(pipe, MIX[:4])  # batches of 2-4 rows, greedy and sampled
    assert made() == before


@pytest.mark.parametrize("predictor,do_sample", [("kv", False), ("reprefill", False), ("kv", True)])
def test_compiled_gives_the_eager_codes(predictor, do_sample):
    req = request(predictor, do_sample)
    got, want = compiled_pipeline("tiny").generate(req), our_pipeline("tiny").generate(req)
    assert got.text_ids == want.text_ids
    np.testing.assert_array_equal(got.codes, want.codes)
    np.testing.assert_allclose(got.audio, want.audio, rtol=0, atol=1e-5)
    assert got.stats.frames == FRAMES


def test_compare_mode_compiled_has_no_mismatch():
    result = compiled_pipeline("tiny").generate(request("compare", frames=24))
    assert result.stats.mismatches == 0 and result.stats.frames == 24


def test_pipeline_info_says_compiled():
    assert compiled_pipeline("tiny").info["compiled"] is True
    assert our_pipeline("tiny").info["compiled"] is False


def test_only_a_pipeline_with_pieces_to_build_needs_its_warm_up():
    """app.py warms up before serving where `warm_up` builds something (compiled pieces; CUDA graphs:
    test_cuda_graph.py); an eager CPU pipeline starts at once."""
    assert compiled_pipeline("tiny").needs_warm_up and not our_pipeline("tiny").needs_warm_up


def test_a_second_predictor_of_the_same_shapes_shares_the_units_and_computes_with_its_own_weights():
    """A unit's weights are its inputs, never constants in its code: a second predictor of the same shapes
    reads the same files (no compile), and its frames compute with its own weights: its eager codes, which
    are not the first one's."""
    from omni_core.fast.compiled import CompiledPredictors
    from omni_core.models.code_predictor import GREEDY, predict_kv, predict_reprefill

    first = compiled_pipeline("tiny").predictors.compiled
    second_cp = copy.deepcopy(first.cp)
    for head in second_cp.lm_head:
        head.weight.data = head.weight.data.flip(0)  # other codes, same shapes
    second = CompiledPredictors(second_cp)
    with engine_threads():  # the names the engine's thread gave them
        assert {second.path(*what) for what in first.units} == {first.path(*what) for what in first.units}
        torch.manual_seed(0)
        h, e0 = (torch.randn(3, first.cp.embedding_dim) for _ in range(2))
        for name, eager in (("kv", predict_kv), ("reprefill", predict_reprefill)):
            got, want = second.run(name, h, e0), eager(second_cp, h, e0, GREEDY, alternatives=5)
            assert torch.equal(got[0], want[0]), name
            assert not torch.equal(got[0], first.run(name, h, e0)[0]), name
    assert second.built == 0 and second.loaded == sum(len(first.units[what].variants) for what in second.units)


SECOND_START = """
import json, sys, time
from omni_core import SpeechRequest, load_pipeline
started = time.perf_counter()
pipe = load_pipeline("tiny", device="cpu", compile=True, max_batch=4, threads=2)  # THREADS
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
    """The units this process compiled are kept in the cache folder: a new process with the same model builds
    none, loads every variant, and decodes the same codes."""
    pipe = compiled_pipeline("tiny")  # built or loaded every unit's variants for batches of up to 4 rows
    args = dict(text="Tell me about the sea.", mode="chat", predictor="kv", seed=3, max_frames=24, max_text_tokens=8)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", SECOND_START, json.dumps(args)], capture_output=True, text=True,
                          timeout=600, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    second = json.loads(done.stdout.strip().splitlines()[-1])
    said = done.stderr[-3000:]  # what the warm-up reported
    frames = pipe.predictors.compiled
    assert (second["built"], second["loaded"]) == (0, frames.built + frames.loaded), said
    steps = sum(s.built + s.loaded for s in pipe.steps)
    assert (second["steps_built"], second["steps_loaded"]) == (0, steps), said
    np.testing.assert_array_equal(np.array(second["codes"]), pipe.generate(SpeechRequest(**args)).codes)
    print(f"second start with compile=True ready in {second['ready_s']:.1f} s")


def test_a_background_build_serves_eagerly_and_takes_over_between_requests(monkeypatch):
    """warm_up(background=True), as app.py starts on a CPU: requests decode eagerly while the units are built or
    loaded in a thread of their own; the units take over only when no request is in flight (a request decodes
    wholly one way), and from then on requests decode compiled, with the eager codes either way."""
    compiled_pipeline("tiny")  # the units are in the cache folder by now: the background build loads them
    pipe = load_pipeline("tiny", device="cpu", compile=True, max_batch=4, threads=THREADS)
    units = pipe.predictors.compiled
    long = request("kv", frames=FRAMES)
    eager_when_emitted = []  # per event of the long request, in the engine's thread as it is emitted (a reader
    emit = Sequence.emit  # that lags behind may read the last ones after the take-over)

    def noted(seq, event):
        if seq.req.text == long.text and seq.req.max_frames == FRAMES:  # (the engine holds a checked copy)
            eager_when_emitted.append(pipe.predictors.compiled is None and not pipe.background.ready.is_set())
        emit(seq, event)

    try:
        events = pipe.stream(long)
        next(events)  # running before the build starts
        pipe.warm_up(background=True)  # its short requests decode beside the long one, eagerly
        monkeypatch.setattr(Sequence, "emit", noted)
        assert pipe.info["compiled"] and pipe.info["compiling"]
        for event in events:
            if isinstance(event, Done):
                during = event.result
        monkeypatch.undo()
        assert eager_when_emitted and all(eager_when_emitted)  # the long one was in flight
        assert pipe.background.ready.wait(120) and pipe.background.error is None
        assert pipe.predictors.compiled is units and pipe.talker.model.rows_step is not None
        assert not pipe.info["compiling"] and units.built + units.loaded > 0
        called = []
        for what, unit in list(units.units.items()):  # counted: the next request runs them
            units.units[what] = lambda *args, unit=unit: (called.append(what), unit(*args))[1]
        after = pipe.generate(request("kv", frames=FRAMES))
    finally:
        pipe.close()
    assert len(called) == FRAMES * 15
    want = our_pipeline("tiny").generate(request("kv", frames=FRAMES))
    for got in (during, after):
        np.testing.assert_array_equal(got.codes, want.codes)
