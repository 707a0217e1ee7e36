"""The planner's timing of small weights: the plan that holds on the engine's threads against the same plan on
one thread (Kernel.SERIAL), which is how it chooses between them at load (omni_core/planner/choose.py).

Run it twice, with and without OMP_WAIT_POLICY=PASSIVE: where OpenMP's waiting threads sleep, every
multi-thread call pays a wake-up and one thread tends to win; where they spin (the default), the engine's
threads may (BENCHMARKS.md, "Before and after a change"). That is why the policy is part of the plans' machine key.

    .venv/bin/python -m benchmarks.plan_timing [--shapes 1024x512+bias 512x1024] [--dtype bfloat16]
        [--threads 2] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from benchmarks.bench import machine
from omni_core.planner import probe, timing
from omni_core.planner.choose import serial_plan

# The 0.6B Qwen3-TTS bfloat16 shapes whose plan changed with the wait policy on an EPYC Zen 4
SHAPES = ("1024x512+bias", "2048x512", "3072x512", "512x1024", "512x1024+bias")


def weight_of(shape: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """"OUTxIN" or "OUTxIN+bias" → a random weight [OUT, IN] (and bias [OUT])."""
    dims, _, bias = shape.partition("+")
    out, inp = (int(d) for d in dims.split("x"))
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(out, inp, generator=gen).to(dtype),
            torch.randn(out, generator=gen).to(dtype) if bias else None)


def time_shape(shape: str, dtype: torch.dtype) -> dict:
    """The shape's plan on the engine's threads and on one thread, each timed as the planner times it
    (1 row and 8 rows, weight hot in the cache, 21 rounds), and the one `timing.fastest` takes."""
    weight, bias = weight_of(shape, dtype)
    run = probe.first_holding(weight, bias)
    plans = [run, serial_plan(weight, bias)]
    times = timing.timings(plans, weight, bias, evict=False, repeats=21)
    us = {p.kernel.value: [round(t * 1e6, 1) for t in times[p]] for p in plans}
    return dict(shape=shape, dtype=str(dtype).replace("torch.", ""), plan=f"{run.pad_min}-{run.chunk}",
                us_1_and_8_rows=us, takes=timing.fastest(plans, times).kernel.value)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps({**machine(), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "(unset)")}))
    rows = [time_shape(shape, getattr(torch, args.dtype)) for _ in range(args.runs) for shape in args.shapes]
    for row in rows:
        print(json.dumps(row))
    return rows


if __name__ == "__main__":
    main()
