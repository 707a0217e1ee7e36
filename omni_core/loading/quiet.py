"""transformers' chatter that is not the user's business, kept off the console."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def quiet_transformers():
    """While building a synthetic checkpoint or reading a tokenizer: transformers' warnings about the
    MRoPE keys its own Qwen3-Omni config classes carry, and its shard-writing progress bar."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
