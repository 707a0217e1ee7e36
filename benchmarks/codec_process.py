"""The codec in the engine's thread against the codec in a process of its own, N requests at once.

BENCHMARKS.md, "Many listeners: the tiny model, batched" and "The codec in its own process at real width".

One pipeline per way, the same requests (N simultaneous speak-mode requests of `frames` frames, one thread
each, as Gradio runs them: bench (f)'s `run_concurrently`), rounds interleaving the ways. "thread tN": the
engine at N kernel threads decodes the audio in its step; "process t1+1": the engine at 1 thread, the codec in
a process at 1 thread (`codec_threads=1`, engine/codec_process.py); "processes t1+1x2": two such processes, the
streams spread over them (`codec_processes=2`, engine/codec_pool.py); "... nice 0": the codec processes at the
engine's priority instead of codec_process.NICE. Prints the aggregate frames/s (median over
rounds), first-audio latency (pooled), and each count over one at once.

    .venv/bin/python -m benchmarks.codec_process [--compile] [--predictor kv] [--counts 1 8 16] [--rounds 3]
        [--model tiny] [--ways "thread t1" "process t1+1"] [--frames 60]
"""

from __future__ import annotations

import argparse
import os

from benchmarks.bench import run_concurrently, summarize
from omni_core import SpeechRequest, load_pipeline
from omni_core.engine.threads import rest_engines

WAYS = {"thread t2": dict(threads=2), "thread t1": dict(threads=1), "process t1+1": dict(threads=1, codec_threads=1),
        "processes t1+1x2": dict(threads=1, codec_threads=1, codec_processes=2)}
WAYS.update({f"{w} nice 0": WAYS[w] for w in ("process t1+1", "processes t1+1x2")})  # at the engine's priority


def at_the_engines_priority(pipe) -> None:
    """A "nice 0" way: its codec processes back at the engine's priority (they start at codec_process.NICE)."""
    for member in pipe.engine.runner.codec.members:
        os.setpriority(os.PRIO_PROCESS, member._process.pid, 0)


def main(model: str, compile: bool, predictor: str, counts: list[int], rounds: int, ways: list[str],
         frames: int) -> dict:
    pipes = {w: load_pipeline(model, device="cpu", compile=compile, max_batch=max(counts),
                              max_waiting=max(counts), **WAYS[w]) for w in ways}
    for w, pipe in pipes.items():
        if w.endswith("nice 0"):
            at_the_engines_priority(pipe)
    try:
        for pipe in pipes.values():
            if compile:
                pipe.warm_up()
            rest_engines()
            run_concurrently(pipe, [SpeechRequest("Warm up.", max_frames=2, predictor=predictor)])
        out = {}
        for n in counts:
            requests = [SpeechRequest(f"Listener number {i} is hearing this sentence.", max_frames=frames, seed=i,
                                      predictor=predictor) for i in range(n)]
            runs = {w: [] for w in pipes}
            for _ in range(rounds):
                for w, pipe in pipes.items():
                    rest_engines()  # the other pipelines' engine threads have ended: one OpenMP team
                    runs[w].append(run_concurrently(pipe, requests))
            for w in pipes:
                s = out[n, w] = summarize(runs[w])
                print(f"{n:3d} at once  {w:23s} {s['frames_per_s']:7.1f} frames/s  first audio p50 "
                      f"{s['first_audio_p50_s']:.3f} s p95 {s['first_audio_p95_s']:.3f} s  rounds "
                      f"{[round(r['frames_per_s'], 1) for r in runs[w]]}", flush=True)
        for w in pipes:
            one = out[counts[0], w]
            print(w + ": " + ", ".join(f"{n} at once {out[n, w]['frames_per_s'] / one['frames_per_s']:.2f}x frames/s "
                                       f"(first audio p95 {out[n, w]['first_audio_p95_s'] / one['first_audio_p95_s']:.2f}x)"
                                       for n in counts[1:]))
        return out
    finally:
        for pipe in pipes.values():
            pipe.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--predictor", default="kv", choices=["kv", "reprefill"])
    parser.add_argument("--counts", nargs="*", type=int, default=[1, 8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", nargs="*", default=["thread t1", "process t1+1"], choices=list(WAYS))
    parser.add_argument("--frames", type=int, default=60)
    args = parser.parse_args()
    main(args.model, args.compile, args.predictor, args.counts, args.rounds, args.ways, args.frames)
