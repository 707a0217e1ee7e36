"""Two versions of omni_core on the same workloads, interleaved: is a change within noise of before?

Each version is a git commit checked out into a temporary worktree (or the working tree itself: "."). Every
round runs every workload once per version, alternating versions, each in a fresh process (the pipeline
loaded there, a warm-up request, then the timed one), so the machine's load drifts over both alike. The
workloads use only the public API that both versions share (load_pipeline, SpeechRequest, generate), as the
page sends them: each request in its own thread.

    tiny-1     the tiny model, one request at a time: KV greedy, re-prefill greedy, KV sampled (60 frames each)
    tiny-8     the tiny model, 8 at once, the page's mix (half KV, half re-prefill, a third sampled), 60 frames
    tts-1      random:qwen3-tts-0.6b in bfloat16 (real widths), one re-prefill greedy request of 16 frames
    tts-8      the same model, 8 at once, the page's mix, 16 frames

Per workload and version: the median over rounds of the aggregate frames/s and of the first audio's p95, and
the second version's ratio to the first.

    .venv/bin/python -m benchmarks.versions OLD_COMMIT [NEW_COMMIT or . (default)] [--rounds 5]
        [--workloads tiny-1 tiny-8 tts-1 tts-8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench import machine

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = {  # name → (source, dtype, requests: [(predictor, do_sample)], at once, frames)
    "tiny-1": ("tiny", "float32", [("kv", False), ("reprefill", False), ("kv", True)], False, 60),
    "tiny-8": ("tiny", "float32", [("reprefill" if i % 2 == 0 else "kv", i % 3 == 2) for i in range(8)], True, 60),
    "tts-1": ("random:qwen3-tts-0.6b", "bfloat16", [("reprefill", False)], False, 16),
    "tts-8": ("random:qwen3-tts-0.6b", "bfloat16", [("reprefill" if i % 2 == 0 else "kv", i % 3 == 2)
                                                    for i in range(8)], True, 16),
}

# Run in a fresh process with PYTHONPATH at one version's tree: argv[1] is the workload as JSON.
CHILD = """
import json, sys, threading, time
from omni_core import SpeechRequest, load_pipeline
source, dtype, kinds, together, frames = json.loads(sys.argv[1])
pipe = load_pipeline(source, device="cpu", dtype=dtype, max_batch=8, max_waiting=8)
def request(i, predictor, sample):
    return SpeechRequest(f"Listener number {i} is hearing this sentence.", max_frames=frames, seed=i,
                         predictor=predictor, do_sample=sample)
for predictor, sample in {tuple(kind) for kind in kinds}:  # warm-up: first calls, lazily built tables
    pipe.generate(SpeechRequest("Warm up.", max_frames=2, predictor=predictor, do_sample=sample))
results = []
def run(i, kind):
    results.append(pipe.generate(request(i, *kind)))
started = time.perf_counter()
if together:
    threads = [threading.Thread(target=run, args=(i, kind)) for i, kind in enumerate(kinds)]
    [t.start() for t in threads]
    [t.join() for t in threads]
else:
    [run(i, kind) for i, kind in enumerate(kinds)]
wall = time.perf_counter() - started
firsts = sorted(r.stats.first_audio_s for r in results)
print(json.dumps(dict(frames_per_s=sum(r.stats.frames for r in results) / wall,
                      first_audio_p95_s=firsts[min(len(firsts) - 1, round(0.95 * (len(firsts) - 1)))])))
pipe.close()
"""


def checkout(commit: str, into: Path) -> Path:
    """The tree of `commit` ("." is the working tree itself)."""
    if commit == ".":
        return ROOT
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), commit], check=True,
                   capture_output=True)
    return into


def run_once(tree: Path, workload: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(WORKLOADS[workload])], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{workload} at {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(versions: list[str], rounds: int, workloads: list[str]) -> dict:
    print(json.dumps(machine()))
    with tempfile.TemporaryDirectory() as tmp:
        trees = {v: checkout(v, Path(tmp) / f"v{i}") for i, v in enumerate(versions)}
        try:
            runs = {(w, v): [] for w in workloads for v in versions}
            for r in range(rounds):
                for w in workloads:
                    for v in (versions if r % 2 == 0 else versions[::-1]):  # who goes first alternates too
                        runs[w, v].append(run_once(trees[v], w))
                        print(f"round {r + 1} {w} {v}: {runs[w, v][-1]}", flush=True)
        finally:
            for v, tree in trees.items():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    return report(runs, versions, workloads)


def report(runs: dict, versions: list[str], workloads: list[str]) -> dict:
    out = {}
    print(f"\n{'workload':8} {'version':>12} {'frames/s':>9} {'first audio p95':>16}")
    for w in workloads:
        for v in versions:
            fps = statistics.median(x["frames_per_s"] for x in runs[w, v])
            first = statistics.median(x["first_audio_p95_s"] for x in runs[w, v])
            out[w, v] = fps, first
            print(f"{w:8} {v:>12} {fps:9.2f} {first:15.3f}s")
        (f0, a0), (f1, a1) = out[w, versions[0]], out[w, versions[-1]]
        print(f"{w:8} {'ratio':>12} {f1 / f0:8.3f}x {a1 / a0:15.3f}x")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new", nargs="?", default=".")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=list(WORKLOADS))
    args = parser.parse_args()
    main([args.old, args.new], args.rounds, args.workloads)
