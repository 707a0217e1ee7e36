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


def test_versions_report_takes_each_versions_median_over_rounds():
    """benchmarks.versions: per workload and version the median of the rounds, a round's outlier left out."""
    from benchmarks.versions import report

    def rounds(*pairs):
        return [{"frames_per_s": fps, "first_audio_p95_s": first} for fps, first in pairs]

    runs = {("tiny-8", "old"): rounds((10.0, 0.3), (30.0, 0.1), (20.0, 0.2)),
            ("tiny-8", "new"): rounds((25.0, 0.1), (500.0, 9.0), (15.0, 0.3))}
    out = report(runs, ["old", "new"], ["tiny-8"])
    assert out["tiny-8", "old"] == (20.0, 0.2) and out["tiny-8", "new"] == (25.0, 0.3)


def test_plan_timing_reports_what_the_planner_would_take():
    """benchmarks.plan_timing: both plans timed, in microseconds, and the one taken is the one `timing.fastest`
    takes from those times (a lone row first: within LONE_ROW_SLACK of the fastest 1-row call, then 8 rows)."""
    from benchmarks.plan_timing import main
    from omni_core.planner.timing import LONE_ROW_SLACK

    (row,) = main(["--shapes", "96x64+bias", "--dtype", "float32", "--threads", "2", "--runs", "1"])
    us = row["us_1_and_8_rows"]
    assert set(us) == {"aten", "serial"} and all(t > 0 for pair in us.values() for t in pair)
    lone = min(one for one, _ in us.values())
    near = {k: eight for k, (one, eight) in us.items() if one <= LONE_ROW_SLACK * lone}
    assert row["takes"] == min(near, key=near.get) or near[row["takes"]] == min(near.values())


def test_top_p_cut_times_both_cuts_for_both_predictors():
    from benchmarks.top_p_cut import main

    rows = main(["--models", "tiny", "--rows", "2", "--rounds", "1", "--threads", "1"])
    assert {(r["predictor"], r["rows"]) for r in rows} == {("kv", 2), ("reprefill", 2)}
    assert all(r["hf_sort_ms"] > 0 and r["top_k_first_ms"] > 0 for r in rows)


def test_predictor_calls_times_every_case_and_both_noises(capsys):
    """benchmarks.predictor_calls: greedy and mixed calls of both predictors, both kinds a call each and in one
    pass, and the two ways to draw noise."""
    import json

    from benchmarks import predictor_calls

    predictor_calls.main(["--rows", "1", "2", "--repeats", "1", "--threads", "1"])
    ms = json.loads(capsys.readouterr().out)["ms_per_call"]
    assert set(ms) == {f"{kind} {rows} {way}" for kind in ("kv", "reprefill") for rows, way in
                       ((1, "greedy"), (2, "greedy"), (2, "mixed"))} | {"noise 1 -log U", "noise 1 exponential_"} \
        | {"both kinds 2 a call per kind", "both kinds 2 one pass"}
    assert all(v > 0 for v in ms.values())
