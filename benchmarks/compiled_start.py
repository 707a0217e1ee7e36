"""(w) Compiled decoding's start-up and speed (issue 59): the first start, the second, and frames/s against eager.

Start: `load_pipeline(source, compile=True, max_batch=N)` and its `warm_up()` in a process of its own, timed from
before the import to ready, on a cache folder of this benchmark's (`bench_cache/`: the synthetic checkpoints and
the matmul plans stay; "cold" deletes its compiled units and inductor's folder first). The first start of a
config is cold, the second finds what the first kept.

Speed: one process holds the eager pipeline and the compiled one of each way (a dtype, /int8), warmed up;
rounds interleave them: one request alone (KV, greedy) and 8 at once (KV, a third sampled: the CPU's default mix),
each timed as the page runs them (one thread per request: bench's `run_concurrently`), medians over rounds.
Every request of the mix is also run alone on both, and its codes compared cell by cell.
`--against REV` adds the compiled pipeline of another commit (e.g. the unrolled frames before units), served by
a process of that commit's tree (a git worktree) that runs the same rounds when told, between ours.

    .venv/bin/python -m benchmarks.compiled_start [--sizes tiny 0.6b] [--ways bfloat16/int8 bfloat16]
        [--skip-start] [--skip-speed] [--against fcd2f9c] [--frames 24] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench_cache"
SOURCES = {"tiny": "tiny", "0.6b": "random:qwen3-tts-0.6b"}
START = """
import json, sys, time
t0 = time.perf_counter()
from omni_core import load_pipeline
args = json.loads(sys.argv[1])
pipe = load_pipeline(args.pop("source"), device="cpu", compile=True, **args)
loaded = time.perf_counter() - t0
pipe.warm_up(lambda message: print(message, file=sys.stderr, flush=True))
ready = time.perf_counter() - t0
c = pipe.predictors.compiled
print(json.dumps(dict(load_s=loaded, ready_s=ready, built=c.built + sum(s.built for s in pipe.steps),
                      loaded=c.loaded + sum(s.loaded for s in pipe.steps))))
pipe.close()
"""


def options(size: str, way: str, max_batch: int) -> dict:
    """load_pipeline's arguments for a size and a way ("bfloat16", "bfloat16/int8", "float32")."""
    dtype, _, quantize = way.partition("/")
    out = dict(source=SOURCES[size], dtype=dtype, max_batch=max_batch, max_waiting=max_batch)
    return {**out, "quantize": quantize} if quantize else out


def env(cache: Path) -> dict:
    return {**os.environ, "OMNI_CORE_CACHE": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "PYTHONPATH": str(ROOT)}


def start(size: str, way: str, max_batch: int, cold: bool) -> dict:
    """One start in a fresh process: seconds to loaded and to ready, variants built and loaded."""
    if cold:
        for folder in ("compiled", "inductor"):
            shutil.rmtree(CACHE / folder, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", START, json.dumps(options(size, way, max_batch))], env=env(CACHE),
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "log": done.stderr.strip().splitlines()[-14:]}


def bench_start(sizes, ways, max_batch: int) -> dict:
    out = {}
    for size in sizes:
        for way in (["float32"] if size == "tiny" else ways):
            # The checkpoint and the plans first (not part of a compiled start): an eager load writes them.
            subprocess.run([sys.executable, "-c", "import json, sys; from omni_core import load_pipeline; "
                            "a = json.loads(sys.argv[1]); load_pipeline(a.pop('source'), device='cpu', **a).close()",
                            json.dumps(options(size, way, max_batch))], env=env(CACHE), check=True, cwd=ROOT,
                           capture_output=True)
            first, second = start(size, way, max_batch, cold=True), start(size, way, max_batch, cold=False)
            out[f"{size} {way}"] = {"first": first, "second": second}
            print(f"{size} {way}: first start {first['ready_s']:.0f} s ({first['built']} variants built), "
                  f"second {second['ready_s']:.1f} s ({second['loaded']} loaded, {second['built']} built)", flush=True)
    return out


def requests(n: int, frames: int):
    from omni_core import SpeechRequest

    return [SpeechRequest(f"Listener number {i} is hearing this sentence right now.", max_frames=frames, seed=i,
                          predictor="kv", do_sample=n > 1 and i % 3 == 2) for i in range(n)]


def one_round(pipe, counts, frames: int) -> dict:
    from benchmarks.bench import run_concurrently

    return {n: run_concurrently(pipe, requests(n, frames))["frames_per_s"] for n in counts}


def serve(size: str, way: str, max_batch: int, counts, frames: int) -> None:
    """Another tree's compiled pipeline: a line in → one round → its frames/s as a JSON line out."""
    pipe = load_pipeline_for(size, way, max_batch, compile=True)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "codes":
            print(json.dumps([pipe.generate(r).codes.tolist() for r in requests(max(counts), frames)]), flush=True)
        else:
            print(json.dumps(one_round(pipe, counts, frames)), flush=True)
    pipe.close()


def load_pipeline_for(size: str, way: str, max_batch: int, compile: bool):
    from omni_core import load_pipeline

    args = options(size, way, max_batch)
    pipe = load_pipeline(args.pop("source"), device="cpu", compile=compile, **args)
    pipe.warm_up()
    return pipe


class Other:
    """The `serve` process of another commit's tree (a worktree at `rev`, on its own cache folder)."""

    def __init__(self, rev: str, size: str, way: str, max_batch: int, counts, frames: int):
        from benchmarks.bench import worktree

        tree = worktree(rev, CACHE)
        cache = CACHE / f"cache-{rev}"
        shutil.copytree(CACHE / "plans", cache / "plans", dirs_exist_ok=True)
        for entry in CACHE.iterdir():  # the checkpoints (written by this tree: the same bytes)
            if entry.name.endswith("-v1") and not (cache / entry.name).exists():
                (cache / entry.name).symlink_to(entry)
        command = [sys.executable, str(Path(__file__)), "--serve", size, way, str(max_batch), str(frames),
                   *map(str, counts)]
        self.proc = subprocess.Popen(command, env={**env(cache), "PYTHONPATH": str(tree)}, cwd=tree, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        json.loads(self.proc.stdout.readline())  # ready (the first time: after compiling its frames)

    def ask(self, what: str = "round"):
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def same_codes(a, b) -> dict:
    import numpy as np

    cells = sum(np.asarray(x).size for x in a)
    equal = sum(int((np.asarray(x) == np.asarray(y)).sum()) if np.asarray(x).shape == np.asarray(y).shape else 0
                for x, y in zip(a, b))
    return {"requests_equal": sum(np.array_equal(x, y) for x, y in zip(a, b)), "requests": len(a),
            "cells_equal": equal, "cells": cells}


def bench_speed(size: str, ways, counts, frames: int, repeats: int, against: str | None) -> dict:
    os.environ.update(env(CACHE))
    out = {}
    for way in ways:
        max_batch = max(counts)
        pipes = {"eager": load_pipeline_for(size, way, max_batch, False),
                 "compiled": load_pipeline_for(size, way, max_batch, True)}
        other = Other(against, size, way, max_batch, counts, frames) if against else None
        rounds = {name: [] for name in [*pipes, *([f"compiled at {against}"] if other else [])]}
        for name, pipe in pipes.items():
            one_round(pipe, counts, 2)  # first calls
        for _ in range(repeats):
            for name, pipe in pipes.items():
                rounds[name].append(one_round(pipe, counts, frames))
            if other:
                rounds[f"compiled at {against}"].append({int(k): v for k, v in other.ask().items()})
        row = {name: {f"{n} at once frames/s": statistics.median(r[n] for r in rs) for n in counts}
               for name, rs in rounds.items()}
        for name in row:
            for n in counts:
                row[name][f"{n} at once over eager"] = (row[name][f"{n} at once frames/s"]
                                                        / row["eager"][f"{n} at once frames/s"])
        codes = {name: [pipe.generate(r).codes for r in requests(max_batch, frames)] for name, pipe in pipes.items()}
        row["compiled codes = eager codes"] = same_codes(codes["compiled"], codes["eager"])
        if other:
            row[f"{against} codes = eager codes"] = same_codes(other.ask("codes"), codes["eager"])
            other.close()
        for pipe in pipes.values():
            pipe.close()
        out[f"{size} {way}"] = row
        print(json.dumps({f"{size} {way}": row}, indent=1), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "0.6b"])
    parser.add_argument("--ways", nargs="+", default=["bfloat16/int8", "bfloat16"])
    parser.add_argument("--max-batch", type=int, default=16, help="the start's (the app's default)")
    parser.add_argument("--counts", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", help="a commit whose compiled pipeline runs beside ours (speed)")
    parser.add_argument("--skip-start", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--json", default="bench_results/compiled_start.json")
    args = parser.parse_args()
    if args.serve:
        size, way, max_batch, frames, *counts = args.serve
        return serve(size, way, int(max_batch), [int(n) for n in counts], int(frames))
    from benchmarks.bench import machine, write_results

    results = {"machine": machine()}
    print(results["machine"], flush=True)
    if not args.skip_start:
        results["start"] = bench_start(args.sizes, args.ways, args.max_batch)
    if not args.skip_speed:
        results["speed"] = {}
        for size in (s for s in args.sizes if s != "tiny"):
            results["speed"].update(bench_speed(size, args.ways, args.counts, args.frames, args.repeats, args.against))
    write_results(results, args.json)


if __name__ == "__main__":
    main()
