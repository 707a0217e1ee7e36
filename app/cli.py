"""Command-line flags for `app.py`. The model is chosen here, at launch, never from the page."""

from __future__ import annotations

import argparse
import os

MAX_BATCH = 16  # requests the engine advances together (and the queue lets in at once)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def default_threads(host: str | None, share: bool = False) -> int:
    """The engine's kernel threads when --threads is not given: all the cores (the engine runs every request
    in its one thread, so nothing oversubscribes), less one where the page is served to this machine only
    (the default host, 127.0.0.1, without --share). The browser showing the page then runs on these cores
    too, drawing the live heatmap, and an engine with a thread on every core waits, at each parallel region,
    for the worker the browser took the core from: on 2 cores the page's requests ran about twice as fast
    with one engine thread as with two (BENCHMARKS.md, "The page and the engine on the same cores")."""
    cores = max(1, os.cpu_count() or 1)
    host = host or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
    return max(1, cores - 1) if host in LOOPBACK and not share else cores


def _at_least_one(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _at_least_zero(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {number}")
    return number


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="app.py", description="Omni Speech Lab: hear Qwen3-Omni's speech path and see its 16 codebooks.")
    parser.add_argument("--model", default=os.environ.get("OMNI_MODEL") or "tiny",
                        help='"tiny" (embedded random-weight model, the default), a local checkpoint directory, '
                             'or a hub id such as Qwen/Qwen3-Omni-30B-A3B-Instruct (downloaded into the hub cache); '
                             'default: $OMNI_MODEL, else tiny (a Space sets it in its settings)')
    parser.add_argument("--revision", default=None,
                        help="the hub id's branch, tag or commit (default: its default branch)")
    parser.add_argument("--force", action="store_true",
                        help="load even when the memory check says the weights do not fit on the device")
    parser.add_argument("--device", default="auto", help='"auto", "cpu", "cuda" or "cuda:N" (default: auto)')
    parser.add_argument("--dtype", default="auto", help='"auto" (the checkpoint\'s; float32 on a CPU without fast bfloat16), "float32" or "bfloat16"')
    parser.add_argument("--host", default=None,
                        help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help="port to listen on (default: $GRADIO_SERVER_PORT, else 7860)")
    parser.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    parser.add_argument("--api-key", default=os.environ.get("OMNI_API_KEY") or None,
                        help="every /v1 call (the OpenAI-compatible speech API) then needs the header "
                             "Authorization: Bearer <key>; the page stays open (default: $OMNI_API_KEY, else none)")
    parser.add_argument("--threads", type=_at_least_one, default=None,
                        help="CPU threads for the engine's kernels (default: all cores, less one when the page is "
                             "served to this machine only, where the browser needs one; one engine thread runs every "
                             "request)")
    parser.add_argument("--codec-threads", type=_at_least_zero, default=0,
                        help="decode the audio in a process of its own with this many CPU threads, beside the "
                             "engine's next step (CPU only; the same audio); 0, the default: in the engine's thread")
    parser.add_argument("--codec-processes", type=_at_least_one, default=1,
                        help="decode the audio in this many such processes (of --codec-threads threads, 1 if not "
                             "given), each request's stream in one: a step's audio decodes in parallel (CPU only)")
    parser.add_argument("--max-batch", type=_at_least_one, default=MAX_BATCH,
                        help=f"requests the engine advances together in one step (default: {MAX_BATCH}); more wait in the queue")
    parser.add_argument("--no-batch-invariance", dest="batch_invariant", action="store_false",
                        help="plain matmuls: a little faster for batches of float32 rows, but a request beside "
                             "others may get other codes than alone (default: batch-invariant)")
    parser.add_argument("--exact", action="store_true",
                        help="the official implementation's bits for every request: one request at a time on plain "
                             "matmuls (slower under load; default: batched, batch-invariant, the fastest kernels "
                             "that hold)")
    parser.add_argument("--quantize", choices=["int8", "int4", "mixed"], default=None,
                        help="int8: the talker's and code predictor's large matmuls with int8 weights (CPU): about "
                             "half the bytes a frame, the codec in float; int4: a quarter, more error; mixed: int4 "
                             "decoder layers, int8 code predictor and heads (BENCHMARKS.md)")
    parser.add_argument("--max-waiting", type=_at_least_zero, default=None,
                        help="requests that may wait for a batch slot (default: 4 x --max-batch); more are refused "
                             "with a message")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the decode steps: the same codes, faster (BENCHMARKS.md, \"Compiled "
                             "start-up\"); the first start compiles them in the background (minutes) while the page "
                             "serves eagerly, later starts load them from the cache folder in seconds")
    parser.add_argument("--time-budget", type=float, default=300.0,
                        help="seconds one request may run before it is stopped (default: 300)")
    args = parser.parse_args(argv)
    if args.exact and args.quantize:
        parser.error(f"--exact gives the official implementation's bits, which --quantize {args.quantize} cannot: "
                     "choose one of the two")
    if args.threads is None:
        args.threads = default_threads(args.host, args.share)
    return args
