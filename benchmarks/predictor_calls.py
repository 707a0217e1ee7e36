"""One predictor call as the engine makes it (`Predictors.run`, one frame for every row), greedy rows against
the page's mix (some rows sampled), and the sampling noise drawn two ways: what a sampled row adds to a step.

Each case is timed in turn (A, B, C, ... then again), in one passing thread with the engine's kernel threads;
medians. The noise: `sampling.draw_noise` (-log U) against `exponential_`, for one sampled predictor row's
frame [G-1, 1, V].

    .venv/bin/python -m benchmarks.predictor_calls [--source tiny] [--rows 1 4] [--repeats 40] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from benchmarks.bench import machine
from omni_core import load_pipeline
from omni_core.engine.threads import in_passing_thread
from omni_core.models.sampling import draw_noise


def cases(pipe, rows: list[int]) -> dict:
    """(kind, rows, "greedy" or "mixed") → a call of the pipeline's predictors; mixed: every third row and
    the first sampled, each with its own generator."""
    preds, C = pipe.predictors, pipe.predictors.cp.embedding_dim
    out = {}
    for kind in ("kv", "reprefill"):
        for B in rows:
            h, e0 = torch.randn(B, C), torch.randn(B, C)
            out[kind, B, "greedy"] = lambda kind=kind, h=h, e0=e0, B=B: preds.run(kind, h, e0, [None] * B)
            if B > 1:
                gens = [torch.Generator().manual_seed(i) if i == 0 or i % 3 == 2 else None for i in range(B)]
                out[kind, B, "mixed"] = lambda kind=kind, h=h, e0=e0, gens=gens: preds.run(kind, h, e0, gens)
    shape = (pipe.predictors.cp.num_code_groups - 1, 1, pipe.predictors.cp.lm_head[0].out_features)
    g = torch.Generator().manual_seed(0)
    out["noise", 1, "-log U"] = lambda: draw_noise(shape, g, "cpu")
    out["noise", 1, "exponential_"] = lambda: torch.empty(shape).exponential_(generator=g)
    return out


def timed(calls: dict, repeats: int) -> dict:
    """Median ms per call, the calls interleaved (two untimed rounds first)."""
    seconds = {k: [] for k in calls}
    with torch.no_grad():
        for i in range(repeats + 2):
            for k, call in calls.items():
                t0 = time.perf_counter()
                call()
                if i >= 2:
                    seconds[k].append(time.perf_counter() - t0)
    return {" ".join(map(str, k)): round(1000 * statistics.median(v), 3) for k, v in seconds.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", default="tiny")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4])
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    pipe = load_pipeline(args.source, device="cpu", dtype=args.dtype, threads=args.threads)
    try:
        ms = in_passing_thread(args.threads, timed, cases(pipe, args.rows), args.repeats)
    finally:
        pipe.close()
    print(json.dumps({"machine": {**machine(), "threads": args.threads}, "source": args.source,
                      "dtype": args.dtype, "ms_per_call": ms}, indent=2))


if __name__ == "__main__":
    main()
