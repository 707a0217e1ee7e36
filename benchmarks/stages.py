"""Where an engine step's time goes: the engine's and the runner's methods timed while N requests run at once.

Wraps `Step`'s parts (schedule, prefill, think, talk, choose_cb0, predict, emit; `run` is the step) and `Runner`'s calls
(admit, prefill, next_inputs, talk, choose_cb0, predict), and `output.add_frame` / `output.decode`,
with timers, then runs N simultaneous speak-mode requests (bench (f)'s `run_concurrently`). Prints, per run, the
milliseconds per engine step of each (and how many calls a step makes), and the first step alone (the newcomers'
prompts, first frame and first audio). A profile, not a benchmark: the timers cost a little themselves.

    .venv/bin/python -m benchmarks.stages [--model tiny] [--dtype auto] [--compile] [--codec-threads 1]
        [--codec-processes 1] [--threads 1] [--counts 1 8] [--frames 60] [--rounds 2] [--predictor kv|reprefill|mix]
"""

from __future__ import annotations

import argparse
import collections
import functools
import time

from benchmarks.bench import page_mix, run_concurrently
from omni_core import SpeechRequest, load_pipeline
from omni_core.engine import output, runner, step
from omni_core.engine.threads import rest_engines

ENGINE_PARTS = ("schedule", "prefill", "think", "talk", "choose_cb0", "predict", "emit", "step")
RUNNER_CALLS = ("admit", "prefill", "next_inputs", "talk", "choose_cb0", "predict")


class Timers:
    def __init__(self):
        self.seconds, self.calls, self.first_step = collections.defaultdict(float), collections.Counter(), {}

    def clear(self) -> None:
        for kept in (self.seconds, self.calls, self.first_step):
            kept.clear()

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t
                self.calls[label] += 1
                if label == "step" and self.calls["step"] == 1:
                    self.first_step.update(self.seconds)

        setattr(owner, name, timed)

    def report(self) -> str:
        steps = max(self.calls["step"], 1)
        per_step = "  ".join(f"{k} {1000 * v / steps:.2f} ms ({self.calls[k] / steps:.1f} calls)"
                             for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1]))
        first = "  ".join(f"{k} {1000 * v:.1f}" for k, v in sorted(self.first_step.items(), key=lambda kv: -kv[1]))
        return f"  per step: {per_step}\n  first step, ms: {first}"


def install() -> Timers:
    timers = Timers()
    for name in ENGINE_PARTS:
        timers.wrap(step.Step, "run" if name == "step" else name, name)
    for name in RUNNER_CALLS:
        timers.wrap(runner.Runner, name, "runner." + name)
    for name in ("add_frame", "decode"):
        timers.wrap(output, name, name)
    return timers


def main(args) -> None:
    timers = install()
    pipe = load_pipeline(args.model, device="cpu", dtype=args.dtype, compile=args.compile, threads=args.threads,
                         codec_threads=args.codec_threads or None,
                         codec_processes=args.codec_processes, max_batch=max(args.counts),
                         max_waiting=max(args.counts))
    try:
        if args.compile:
            pipe.warm_up()
        rest_engines()
        run_concurrently(pipe, [SpeechRequest("Warm up.", max_frames=2, predictor=predictor)
                                for predictor in ("kv", "reprefill")])
        for n in args.counts:
            requests = page_mix(n, args.frames) if args.predictor == "mix" else [
                SpeechRequest(f"Listener number {i} is hearing this sentence.", max_frames=args.frames, seed=i,
                              predictor=args.predictor) for i in range(n)]
            for _ in range(args.rounds):
                timers.clear()
                rest_engines()
                out = run_concurrently(pipe, requests)
                print(f"{n} at once: {out['frames_per_s']:.1f} frames/s, first audio (last of them) "
                      f"{max(out['first_audio_s']):.3f} s, {timers.calls['step']} steps", flush=True)
                print(timers.report(), flush=True)
    finally:
        pipe.close()


if __name__ == "__main__":  # the codec process is spawned: its start must not run this again
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--codec-threads", type=int, default=0, help="0: the codec in the engine's thread")
    parser.add_argument("--codec-processes", type=int, default=1, help="codec processes (with --codec-threads)")
    parser.add_argument("--threads", type=int, default=None, help="the engine's kernel threads (default: all)")
    parser.add_argument("--counts", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--predictor", default="kv", choices=["kv", "reprefill", "mix"],
                        help="mix: the page's traffic (bench.page_mix: half each predictor, a third sampled)")
    main(parser.parse_args())
