"""A sampled predictor frame (CB1..CB15, eager, default mode) with each top-p cut, interleaved: HF's sort of the
whole vocabulary (exact mode's) against top-p over the top-k survivors (the default mode's: `sampling.top_p_of_top_k`).

    .venv/bin/python -m benchmarks.top_p_cut [--models tiny random:qwen3-tts-0.6b] [--rows 1 8] [--rounds 12]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import torch

from benchmarks.bench import machine
from omni_core import load_pipeline
from omni_core.fast.predictors import Predictors

DTYPES = {"tiny": "float32"}  # the rest: bfloat16


def frame_times(pipe, rows: int, rounds: int) -> dict[tuple[bool, str], float]:
    """{(top_p_of_top_k, predictor kind): median seconds of a sampled `rows`-row frame}."""
    cp = pipe.talker.code_predictor
    h, e0 = (torch.randn(rows, cp.embedding_dim).to(pipe.dtype) for _ in range(2))
    predictors = Predictors(cp, pipe.device)
    times: dict[tuple[bool, str], list[float]] = {(cut, kind): [] for cut in (False, True) for kind in ("kv", "reprefill")}
    for r in range(rounds + 1):  # the first round warms up
        for cut, kind in times:
            cp.sampling = dataclasses.replace(cp.sampling, top_p_of_top_k=cut)
            generators = [torch.Generator().manual_seed(i) for i in range(rows)]
            start = time.perf_counter()
            predictors.run(kind, h, e0, generators)
            if r:
                times[cut, kind].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "random:qwen3-tts-0.6b"])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    print(json.dumps(machine() | {"threads": args.threads}))
    out = []
    for model in args.models:
        with load_pipeline(model, device="cpu", dtype=DTYPES.get(model, "bfloat16"), threads=args.threads) as pipe:
            torch.set_num_threads(args.threads)
            for rows in args.rows:
                t = frame_times(pipe, rows, args.rounds)
                for kind in ("kv", "reprefill"):
                    out.append(dict(model=model, rows=rows, predictor=kind, hf_sort_ms=round(1e3 * t[False, kind], 2),
                                    top_k_first_ms=round(1e3 * t[True, kind], 2),
                                    ratio=round(t[False, kind] / t[True, kind], 3)))
                    print(json.dumps(out[-1]), flush=True)
    return out


if __name__ == "__main__":
    main()
