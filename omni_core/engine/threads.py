"""Where torch's CPU kernels run: in one living thread per process, the engine's.

torch's CPU kernels run on OpenMP (libgomp). Every thread that starts a parallel region gets its
own team of worker threads, and the team lives as long as that thread. While the workers of all
living teams outnumber the cores, libgomp stops letting idle workers spin: each parallel region
then wakes sleeping workers, about 70 µs a time. Measured on this project's 2-core machine (torch
2.13, benchmarks/threads.py): a 15-row float32 linear takes 6 µs in the only team and 61-84 µs
beside a second, idle team; a real-size code-predictor frame 244 against 293 ms; with the weights
loaded in the caller's thread (a second team for good), a lone tiny-model request ran 1.5-1.9x
slower and 8 at once 2.2-2.5x slower than now. So:

- a pipeline loads its weights (init, the batch-invariant plans' probes) and is made (its family's
  set-up runs kernels: Qwen3-TTS projects its special tokens' text at 0.6B widths, a parallel region)
  `in_passing_thread`, which ends and takes its team with it;
- an engine's thread on a CPU ends when it has been idle for `IDLE_EXIT_S` (`idle_exit_s`: on a GPU
  it stays), or at once when idle after `rest_engines()`, and a new one starts at the next request
  (engine/loop.py), so idle pipelines keep no team alive. Not sooner: a new thread's first request runs ~15 ms slower (its talker
  prefill, measured; the cause is not known), which a user clicking again would hear;
- callers' threads (the app's, Gradio's workers) run no kernels: they hand work to the engine
  (`Pipeline.call`, `decode`, `encode`).

Each of these threads runs with the same number of kernel threads (`torch.set_num_threads` sets
it for the calling thread only, as OpenMP does).
"""

from __future__ import annotations

import atexit
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import torch

IDLE_EXIT_S = 30.0  # an engine thread with nothing to do for this long ends
ENGINES: weakref.WeakSet = weakref.WeakSet()  # every engine made (engine/loop.py adds itself)


def idle_exit_s(device: torch.device) -> float | None:
    """How long an idle engine's thread waits for work before it ends (None: it never ends by itself).
    On a CPU, `IDLE_EXIT_S`: the thread's OpenMP team goes with it (above). On a GPU no team is at stake,
    and a new thread's first CUDA calls would fall on the next request's first audio (BENCHMARKS.md,
    "On a GPU")."""
    return IDLE_EXIT_S if device.type == "cpu" else None


def in_passing_thread(threads: int, fn, *args, **kwargs):
    """fn(*args, **kwargs) in a new thread with `threads` kernel threads, which ends when fn returns:
    its return value, or its exception raised here."""

    def run():
        torch.set_num_threads(threads)
        return fn(*args, **kwargs)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="omni-passing") as pool:  # exits: joined
        return pool.submit(run).result()


def rest_engines(timeout: float = 60.0) -> None:
    """Ask every engine of this process to end its thread as soon as it is idle, and wait until the
    idle ones have: what a benchmark does before timing one thing, so that no other team shares the
    cores. An engine that holds requests (a reader that stopped reading keeps its request paused)
    cannot rest and is not waited for. Raises TimeoutError if an idle one has not ended after `timeout` s."""
    engines = list(ENGINES)
    for engine in engines:
        engine.rest()
    end = time.monotonic() + timeout
    while any(engine.has_thread and not engine.active for engine in engines):
        if time.monotonic() > end:
            raise TimeoutError(f"an idle engine's thread was still running after {timeout:.0f} s")
        time.sleep(0.01)


@atexit.register
def _close_engines_at_exit() -> None:
    """End every engine's thread before the interpreter shuts down. A pipeline nobody closed would
    otherwise leave its daemon thread running into Python's finalization, and the process then
    aborts at exit ("terminate called without an active exception", seen in 2 of 3 runs)."""
    for engine in list(ENGINES):
        engine.close(timeout=5.0)
