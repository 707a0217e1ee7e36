"""(l) Qwen3-TTS 0.6B at real size, many requests at once (issue 21's last goal).

`random:qwen3-tts-0.6b` (random weights at the real widths), one pipeline per dtype, N simultaneous
requests of `frames` frames each (one thread per request, as Gradio runs them: bench (f)'s
`run_concurrently`): `--mix page` (the default) as the page's traffic (bench (f)'s `page_mix`: half on the
KV predictor, half on re-prefill, a third sampled), `--mix kv` all greedy on the KV predictor. Per N: the aggregate frames/s (median over rounds), the
first-audio latencies pooled over rounds, and both as ratios to 1 at once. Rounds interleave the
counts, so the machine's load drifts over all of them alike.

The goal: 8 at once ≥ 4× the aggregate frames/s of one, in bfloat16. Whether rows are nearly free
depends on the CPU: a memory-bound step reads the weights once for every row of the batch, but a CPU
without native bfloat16 converts on every row (docs/benchmarks-history.md (k): bfloat16 costs the same
per row at any count there), and float32's small-row GEMMs cost 2-4x a 1-row call on this EPYC.

--ways runs several pipelines, their rounds interleaved too: "default" (batch-invariant plans, a lone row padded
into its batch's kernel), "exact" (`exact=True`: one request at a time on plain matmuls), "plain" (no batch
invariance).

    .venv/bin/python -m benchmarks.tts_batched [--quick] [--dtypes float32 bfloat16] [--counts 1 4 8]
        [--ways default exact plain] [--mix page kv]
"""

from __future__ import annotations

import argparse
import gc

from benchmarks.bench import machine, page_mix, print_section, run_concurrently, summarize, write_results
from omni_core import SpeechRequest, load_pipeline

SOURCE = "random:qwen3-tts-0.6b"
WAYS = {"default": {}, "exact": {"exact": True}, "plain": {"batch_invariant": False}}


def requests(n: int, frames: int, mix: str = "page") -> list[SpeechRequest]:
    if mix == "page":
        return page_mix(n, frames)
    return [SpeechRequest(f"Listener number {i} is hearing this sentence right now.", max_frames=frames, seed=i,
                          predictor="kv") for i in range(n)]


def bench_dtype(dtype: str, counts: tuple[int, ...], frames: int, repeats: int, ways=("default",),
                mix: str = "page") -> dict:
    """{way: results} (the results alone for one way), the ways' pipelines loaded together, rounds interleaved."""
    pipes = {way: load_pipeline(SOURCE, device="cpu", dtype=dtype, max_batch=max(counts), max_waiting=max(counts),
                                **WAYS[way]) for way in ways}
    try:
        runs: dict[tuple, list] = {(way, n): [] for way in ways for n in counts}
        for pipe in pipes.values():
            run_concurrently(pipe, requests(1, 2))  # warm-up: first calls, lazily built tables
        for _ in range(repeats):
            for way, pipe in pipes.items():
                for n in counts:
                    runs[way, n].append(run_concurrently(pipe, requests(n, frames, mix)))
        outs = {way: summarize_way({n: runs[way, n] for n in counts}, pipe) for way, pipe in pipes.items()}
        return outs if len(ways) > 1 else outs[ways[0]]
    finally:
        for pipe in pipes.values():
            pipe.close()
        del pipes
        gc.collect()


def summarize_way(runs: dict[int, list], pipe) -> dict:
    out = {f"{n} at once": summarize(rs) for n, rs in runs.items()}
    one = out[f"{min(runs)} at once"]
    for n in sorted(runs)[1:]:
        row = out[f"{n} at once"]
        row["fps_over_one"] = row["frames_per_s"] / one["frames_per_s"]
        row["first_audio_p95_over_one"] = row["first_audio_p95_s"] / one["first_audio_p95_s"]
    out["plans"] = plans_used(pipe)
    return out


def plans_used(pipe) -> dict[str, int]:
    """How many of the talker's matmuls run under each batch-invariant plan ('pad_min/chunk')."""
    from omni_core.models.invariant import Linear

    counted: dict[str, int] = {}
    for m in pipe.talker.modules():
        if isinstance(m, Linear):
            name = f"{m.plan.pad_min}/{m.plan.chunk}"
            counted[name] = counted.get(name, 0) + 1
    return counted


def main(quick: bool = False, json_path: str = "bench_results/tts_batched.json", dtypes=("float32", "bfloat16"),
         counts=(1, 4, 8), frames: int | None = None, ways=("default",), mix: str = "page") -> dict:
    frames = frames or (8 if quick else 16)
    repeats = 1 if quick else 3
    results = {"machine": machine(), "source": SOURCE, "frames": frames, "repeats": repeats, "mix": mix}
    for dtype in dtypes:
        print(f"-- {dtype}", flush=True)
        results[dtype] = bench_dtype(dtype, tuple(counts), frames, repeats, tuple(ways), mix)
        print_section("l", results[dtype])
    write_results(results, json_path)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 frames, 1 round")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--counts", nargs="*", type=int, default=[1, 4, 8])
    parser.add_argument("--frames", type=int, default=None, help="frames per request (default 16; --quick 8)")
    parser.add_argument("--ways", nargs="*", default=["default"], choices=list(WAYS))
    parser.add_argument("--mix", default="page", choices=["page", "kv"])
    parser.add_argument("--json", default="bench_results/tts_batched.json")
    args = parser.parse_args()
    print(machine(), flush=True)  # run alone (bench.py prints it once for all its sections)
    main(args.quick, args.json, args.dtypes, args.counts, args.frames, args.ways, args.mix)
