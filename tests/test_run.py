"""Per-request state: concurrent requests equal solo runs; cancellation; budgets; memory."""

from __future__ import annotations

import gc
import resource
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from omni_core import Done, Frame, SpeechRequest

from .conftest import our_pipeline

REQUESTS = [
    SpeechRequest("First voice.", seed=1, do_sample=True, max_frames=10),
    SpeechRequest("Second voice, greedy.", predictor="kv", max_frames=12),
    SpeechRequest("Third voice.", seed=2, do_sample=True, predictor="kv", max_frames=8),
    SpeechRequest("Fourth one chats.", mode="chat", max_frames=9, max_text_tokens=6),
]


def test_concurrent_requests_equal_solo_runs():
    pipe = our_pipeline("tiny")
    solo = [pipe.generate(r).codes for r in REQUESTS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(pipe.generate, REQUESTS * 2))
    for i, result in enumerate(together):
        np.testing.assert_array_equal(result.codes, solo[i % len(REQUESTS)])


def test_cancel_stops_within_a_frame_and_the_next_request_runs():
    pipe = our_pipeline("tiny")
    cancel = threading.Event()
    frames = 0
    for event in pipe.stream(SpeechRequest("Stop me soon.", max_frames=200), cancel=cancel):
        if isinstance(event, Frame):
            frames += 1
            if frames == 3:
                cancel.set()
        if isinstance(event, Done):
            assert event.result.stats.stopped == "cancelled"
            assert event.result.stats.frames == 3
    after = pipe.generate(SpeechRequest("Stop me soon.", max_frames=5))
    assert after.stats.frames == 5 and after.stats.stopped == "max_frames"


def test_closing_the_stream_ends_the_run():
    pipe = our_pipeline("tiny")
    stream = pipe.stream(SpeechRequest("A client that disconnects.", max_frames=200))
    for event in stream:
        if isinstance(event, Frame):
            break
    stream.close()  # what a server does when the browser goes away
    assert stream.gi_frame is None


def test_time_budget_stops_a_long_request():
    pipe = our_pipeline("tiny")
    pipe.time_budget_s = 1e-6
    try:
        result = pipe.generate(SpeechRequest("Budgeted.", max_frames=100))
    finally:
        pipe.time_budget_s = None
    assert result.stats.stopped == "time_budget" and result.stats.frames < 100
    assert any("time budget" in w for w in result.stats.warnings)


def test_memory_stays_bounded_over_many_requests():
    pipe = our_pipeline("tiny")
    request = SpeechRequest("Again and again.", max_frames=6)
    for _ in range(5):
        pipe.generate(request)
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(50):
        pipe.generate(request)
    gc.collect()
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert growth_mb < 50, f"peak memory grew by {growth_mb:.0f} MB over 50 requests"
