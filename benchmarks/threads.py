"""Why kernels run in one living thread (omni_core/engine/threads.py), measured.

  t1  a 15-row float32 linear (64 → 256) and a 200k-element exp: in a thread that is the only one
      with an OpenMP team, and beside a second team that sits idle (one earlier kernel call in
      another, still-living thread);
  t3  the real-size code predictor (5 x 1024, float32, KV, one request): ms per frame, alone and
      beside a second idle team, as t1;
  t2  a lone request and 8 at once (tiny model, eager, 60 frames), with the weights loaded the old way
      (in the caller's thread, whose team lives on) and the new way (in a thread that ends): each
      in a fresh process, the two alternating, medians of 3 runs per process.

    .venv/bin/python -m benchmarks.threads [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

import torch
import torch.nn.functional as F


def per_call_us(fn, calls: int) -> float:
    for _ in range(50):
        fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e6 * (time.perf_counter() - t) / calls


def kernels_us() -> dict[str, float]:
    x, w, big = torch.randn(15, 64), torch.randn(256, 64), torch.randn(200_000)
    return {"linear 15x64x256": per_call_us(lambda: F.linear(x, w), 2000), "exp 200k": per_call_us(big.exp, 500)}


def in_thread(fn):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", fn()))
    thread.start()
    thread.join()
    return box["out"]


def real_predictor_ms() -> dict[str, float]:
    from benchmarks.bench import _real_predictor
    from omni_core.models.code_predictor import predict_kv

    _, cp = _real_predictor(torch.float32, "cpu")
    h, e0 = torch.randn(1, 1024), torch.randn(1, 1024)
    with torch.no_grad():
        return {"real predictor ms/frame": per_call_us(lambda: predict_kv(cp, h, e0), 5) / 1000}


def t1_child(second_team: bool, measure=kernels_us) -> None:
    """One measurement in this fresh process: with or without a second, idle, living team."""
    release = threading.Event()
    if second_team:
        started = threading.Event()

        def idle_team():
            F.linear(torch.randn(15, 64), torch.randn(256, 64))  # its first parallel region makes its team
            torch.randn(200_000).exp()
            started.set()
            release.wait()

        threading.Thread(target=idle_team, daemon=True).start()
        started.wait()
    print(json.dumps(in_thread(measure)))
    release.set()


def t2_child(old: bool) -> None:
    """Frames/s of 1 and 8 requests at once in this fresh process, loading the old or the new way."""
    import omni_core.pipeline as pipeline
    from benchmarks.bench import run_concurrently
    from omni_core.request import SpeechRequest

    if old:  # what load_pipeline did before: the weights load in the calling thread
        def in_caller(threads, fn, *args, **kwargs):
            torch.set_num_threads(threads)
            return fn(*args, **kwargs)
        pipeline.in_passing_thread = in_caller
    pipe = pipeline.load_pipeline("tiny", device="cpu")
    out = {}
    for n in (1, 8):
        requests = [SpeechRequest(f"Listener number {i} is hearing this sentence.", max_frames=60, seed=i)
                    for i in range(n)]
        run_concurrently(pipe, requests)  # warm-up
        out[f"{n} at once"] = statistics.median(run_concurrently(pipe, requests)["frames_per_s"] for _ in range(3))
    print(json.dumps(out))


def child(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.threads", "--child", *args], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(rounds: int) -> None:
    runs = {name: [] for name in ("t1 alone", "t1 beside a second team", "t3 alone", "t3 beside a second team",
                                  "t2 old loading", "t2 new loading")}
    for _ in range(rounds):
        runs["t1 alone"].append(child("t1", "0"))
        runs["t1 beside a second team"].append(child("t1", "1"))
        runs["t3 alone"].append(child("t3", "0"))
        runs["t3 beside a second team"].append(child("t3", "1"))
        runs["t2 old loading"].append(child("t2", "1"))
        runs["t2 new loading"].append(child("t2", "0"))
    for name, results in runs.items():
        print(name, {k: round(statistics.median(r[k] for r in results), 1) for k in results[0]})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=2, default=None)
    args = parser.parse_args()
    if args.child is None:
        main(args.rounds)
    elif args.child[0] == "t1":
        t1_child(args.child[1] == "1")
    elif args.child[0] == "t3":
        t1_child(args.child[1] == "1", real_predictor_ms)
    else:
        t2_child(args.child[1] == "1")
