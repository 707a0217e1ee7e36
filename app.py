"""Omni Speech Lab: `python app.py [--model tiny|/path/to/checkpoint|org/name] [--device auto] [--port N] [--share]
[--api-key KEY]`: the page, and beside it the OpenAI-compatible speech API (app/api.py)."""

import sys

from app.cli import parse_args


def main() -> None:
    # Imported here, not above: a codec process (--codec-threads) is spawned, and a spawned process imports
    # this file again; gradio there cost every codec process seconds before it could serve.
    from app import api
    from app.files import OutputDir
    from app.ui import build_ui, launch_kwargs
    from omni_core import load_pipeline

    args = parse_args()
    try:
        pipe = load_pipeline(args.model, device=args.device, dtype=args.dtype, threads=args.threads,
                             time_budget_s=args.time_budget, compile=args.compile,
                             revision=args.revision, force=args.force,
                             max_batch=args.max_batch, max_waiting=args.max_waiting,
                             batch_invariant=args.batch_invariant, exact=args.exact,
                             codec_threads=args.codec_threads or None,
                             codec_processes=args.codec_processes, quantize=args.quantize)
        print(pipe.load_report, flush=True)
        if pipe.needs_warm_up:  # compiled units, CUDA graphs: built now, not in a visitor's request
            # On a CPU the units compile in the background and the page serves eagerly until they are ready.
            pipe.warm_up(report=lambda message: print(message, flush=True), background=pipe.device.type == "cpu")
    except (ValueError, OSError) as exc:  # CheckpointError names the file and the problem
        sys.exit(f"Cannot load model {args.model!r}: {exc}")
    outputs = OutputDir()
    # The page and the speech API (/v1/audio/speech) on one server, one engine: their requests batch together.
    build_ui(pipe, outputs).launch(**launch_kwargs(args, outputs, api.routes(pipe, args.api_key)))


if __name__ == "__main__":
    main()
