"""benchmarks/bench.py's concurrency harness (section f): every request of a run is measured, and a
request the engine refuses breaks the run with its reason instead of a None among the latencies."""

from __future__ import annotations

import pytest

from benchmarks.bench import run_concurrently
from omni_core import SpeechRequest, load_pipeline


def requests(n: int) -> list[SpeechRequest]:
    return [SpeechRequest(f"Listener {i}.", max_frames=3, seed=i) for i in range(n)]


def test_one_at_a_time_baseline_measures_every_request():
    # All six may be in line before the engine takes the first: the line must hold all of them.
    with load_pipeline("tiny", device="cpu", max_batch=1, max_waiting=6) as pipe:
        run = run_concurrently(pipe, requests(6))
    assert all(isinstance(f, float) and f > 0 for f in run["first_audio_s"])
    assert len(run["rtf"]) == 6 and run["frames_per_s"] > 0


def test_a_refused_request_is_an_error():
    with load_pipeline("tiny", device="cpu", max_batch=1, max_waiting=1) as pipe:
        with pytest.raises(RuntimeError, match="requests failed: the engine is busy"):
            run_concurrently(pipe, requests(4))
