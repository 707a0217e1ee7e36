"""Command-line flags for `app.py`. The model is chosen here, at launch, never from the page."""

from __future__ import annotations

import argparse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="app.py", description="Omni Speech Lab: hear Qwen3-Omni's speech path and see its 16 codebooks.")
    parser.add_argument("--model", default="tiny",
                        help='"tiny" (embedded random-weight model, the default) or a local Qwen3-Omni checkpoint directory')
    parser.add_argument("--device", default="auto", help='"auto", "cpu", "cuda" or "cuda:N" (default: auto)')
    parser.add_argument("--dtype", default="auto", help='"auto" (follow the checkpoint), "float32" or "bfloat16"')
    parser.add_argument("--host", default=None,
                        help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help="port to listen on (default: $GRADIO_SERVER_PORT, else 7860)")
    parser.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    return parser.parse_args(argv)
