"""(x) First audio and frames/s of Qwen3-TTS 0.6B against other commits, round by round (issue 60).

Each commit (this tree, and each `--against REV` in a git worktree under bench_cache/) serves from a process of
its own: `load_pipeline("random:qwen3-tts-0.6b", dtype, quantize, max_batch 8)` as the app loads it (eager,
the default mode), then, when told, one round:

  short     a lone greedy KV request whose talker prompt is ~40 positions: first audio (submission to the first
            AudioChunk, as the page hears it) and its prefill (frame 0's talker ms)
  long      the same for a ~100-position prompt (the text read whole in the prompt)
  1 / 8     frames/s of one request alone and of 8 at once (KV, a third sampled: the CPU default mix), 24 frames,
            one thread per request as the page runs them (bench's `run_concurrently`)

Rounds alternate the processes (one round each, in turn), 5 rounds, medians; one warm-up round first.
All processes stay loaded side by side (the 0.6B in bfloat16 is ~2 GB each) and wait idle while another runs.

    .venv/bin/python -m benchmarks.first_audio [--against b496210] [--ways bfloat16 bfloat16/int8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench_cache"
SHORT = "Hello there, how are you today?"
LONG = "The quick brown fox jumps over the lazy dog, then rests in the shade of an old oak tree."
FRAMES = 24


def serve(way: str) -> None:
    """A line in → one round → its figures as one JSON line out (this process's tree is the commit's)."""
    import time

    from benchmarks.bench import run_concurrently
    from omni_core import AudioChunk, Done, Frame, SpeechRequest, load_pipeline
    from omni_core.engine import runner

    dtype, _, quantize = way.partition("/")
    pipe = load_pipeline("random:qwen3-tts-0.6b", device="cpu", dtype=dtype, quantize=quantize or None,
                         max_batch=8, max_waiting=8)
    positions = []
    start_talker = runner.Runner.start_talker

    def counted(self, seq):  # the talker prompt's length, for the report
        start_talker(self, seq)
        positions.append(seq.talker_todo.shape[1])

    runner.Runner.start_talker = counted

    def lone(text: str) -> dict:
        request = SpeechRequest(text, predictor="kv", do_sample=False, max_frames=2, text_input="whole")
        t0, first, prefill = time.perf_counter(), None, None
        for event in pipe.stream(request):
            if isinstance(event, Frame) and prefill is None:
                prefill = event.talker_ms
            if isinstance(event, AudioChunk) and first is None:
                first = time.perf_counter() - t0
            if isinstance(event, Done):
                return {"first_audio_ms": 1000 * first, "prefill_ms": prefill, "positions": positions[-1]}
        raise RuntimeError("no Done")

    def many(n: int) -> float:
        requests = [SpeechRequest(f"Listener number {i} is hearing this sentence right now.", max_frames=FRAMES,
                                  seed=i, predictor="kv", do_sample=n > 1 and i % 3 == 2) for i in range(n)]
        return run_concurrently(pipe, requests)["frames_per_s"]

    print(json.dumps({"ready": pipe.load_report}), flush=True)
    for _ in sys.stdin:
        out = {"short": lone(SHORT), "long": lone(LONG), "1 at once frames/s": many(1), "8 at once frames/s": many(8)}
        print(json.dumps(out), flush=True)
    pipe.close()


class Server:
    """`serve` in a process of its own, on the tree of `rev` (None: this tree)."""

    def __init__(self, rev: str | None, way: str):
        from benchmarks.bench import worktree

        tree = ROOT if rev is None else worktree(rev, CACHE)
        command = [sys.executable, str(Path(__file__)), "--serve", way]  # this script, the tree's omni_core
        self.proc = subprocess.Popen(command, cwd=tree, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={**_env(), "PYTHONPATH": str(tree)})
        self.report = json.loads(self.proc.stdout.readline())["ready"]

    def round(self) -> dict:
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _env() -> dict:
    import os

    return {**os.environ, "OMNI_CORE_CACHE": os.environ.get("OMNI_CORE_CACHE", str(ROOT / ".cache" / "omni_core"))}


def medians(rounds: list[dict]) -> dict:
    out = {}
    for key, value in rounds[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.median(r[key][k] for r in rounds) for k in value}
        else:
            out[key] = statistics.median(r[key] for r in rounds)
    return out


def bench(ways, against, rounds: int) -> dict:
    from benchmarks.bench import machine

    results = {"machine": machine(), "rounds": rounds}
    print(results["machine"], flush=True)
    for way in ways:
        servers = {"this tree": Server(None, way), **{rev: Server(rev, way) for rev in against}}
        for server in servers.values():
            server.round()  # warm-up
        runs = {name: [] for name in servers}
        for _ in range(rounds):
            for name, server in servers.items():
                runs[name].append(server.round())
        for server in servers.values():
            server.close()
        results[way] = {name: medians(r) for name, r in runs.items()}
        print(json.dumps({way: results[way]}, indent=1), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ways", nargs="+", default=["bfloat16", "bfloat16/int8"])
    parser.add_argument("--against", nargs="*", default=[], help="other commits, each served from a worktree")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default="bench_results/first_audio.json")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    from benchmarks.bench import write_results

    write_results(bench(args.ways, args.against, args.rounds), args.json)


if __name__ == "__main__":
    main()
