"""One predictor call as the engine makes it (`Predictors.run`, one frame for every row), greedy rows against
the page's mix (some rows sampled), and the sampling noise drawn two ways: what a sampled row adds to a step.
"both kinds": rows half on each predictor (the page's mix), a call per kind against `Predictors.run_rows`'
one pass for both.

Each case is timed in turn (A, B, C, ... then again: `bench.interleaved`), all in one passing thread with the
engine's kernel threads, as the engine's thread makes them (a thread of their own per call would add a new
thread's first kernel calls to each: the noise took 2.2 ms that way, not 0.13); medians. The noise: `sampling.draw_noise` (-log U) against `exponential_`, for one
sampled predictor row's frame [G-1, 1, V].

    .venv/bin/python -m benchmarks.predictor_calls [--source tiny] [--rows 1 4] [--repeats 40] [--threads 2]
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.bench import interleaved, machine
from omni_core import load_pipeline
from omni_core.engine.threads import in_passing_thread
from omni_core.models.sampling import draw_noise


def cases(pipe, rows: list[int]) -> dict:
    """(kind, rows, "greedy" or "mixed") → a call of the pipeline's predictors; mixed: every third row and
    the first sampled, each with its own generator."""
    preds, C = pipe.predictors, pipe.predictors.cp.embedding_dim
    dtype = preds.cp.model.codec_embedding[0].weight.dtype  # the hidden states' (a head may be int8)
    out = {}
    for kind in ("kv", "reprefill"):
        for B in rows:
            h, e0 = torch.randn(B, C, dtype=dtype), torch.randn(B, C, dtype=dtype)
            out[kind, B, "greedy"] = lambda kind=kind, h=h, e0=e0, B=B: preds.run(kind, h, e0, [None] * B)
            if B > 1:
                gens = [torch.Generator().manual_seed(i) if i == 0 or i % 3 == 2 else None for i in range(B)]
                out[kind, B, "mixed"] = lambda kind=kind, h=h, e0=e0, gens=gens: preds.run(kind, h, e0, gens)
    for B in (b for b in rows if b > 1):  # the page's mix of kinds: a call per kind against one pass for both
        h, e0 = torch.randn(B, C, dtype=dtype), torch.randn(B, C, dtype=dtype)
        kinds = ["kv" if i % 2 else "reprefill" for i in range(B)]
        gens = [torch.Generator().manual_seed(i) if i % 3 == 2 else None for i in range(B)]
        split = {k: [i for i in range(B) if kinds[i] == k] for k in ("kv", "reprefill")}
        out["both kinds", B, "a call per kind"] = lambda h=h, e0=e0, gens=gens, split=split: [
            preds.run(k, h[r], e0[r], [gens[i] for i in r]) for k, r in split.items()]
        out["both kinds", B, "one pass"] = lambda h=h, e0=e0, gens=gens, kinds=kinds: preds.run_rows(
            kinds, [False] * len(kinds), h, e0, gens)
    shape = (pipe.predictors.cp.num_code_groups - 1, 1, pipe.predictors.cp.lm_head[0].out_features)
    g = torch.Generator().manual_seed(0)
    out["noise", 1, "-log U"] = lambda: draw_noise(shape, g, "cpu")
    out["noise", 1, "exponential_"] = lambda: torch.empty(shape).exponential_(generator=g)
    return out


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
        named = {" ".join(map(str, k)): fn for k, fn in cases(pipe, args.rows).items()}
        seconds = in_passing_thread(args.threads, interleaved, named, args.repeats, 2, False)
    finally:
        pipe.close()
    ms = {k: round(1000 * v, 3) for k, v in seconds.items()}
    print(json.dumps({"machine": {**machine(), "threads": args.threads}, "source": args.source,
                      "dtype": args.dtype, "ms_per_call": ms}, indent=2))


if __name__ == "__main__":
    main()
