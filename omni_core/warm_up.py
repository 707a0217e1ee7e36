"""`Pipeline.warm_up`: what a pipeline builds before its first request (compiled units, CUDA graphs), and a short
request per decode path, so that no user's request waits for a compiler or a first call."""

from __future__ import annotations

import time

import numpy as np
import torch

from omni_core.audio import SAMPLE_RATE
from omni_core.request import SpeechRequest


def warm_up(pipe, report=None, background: bool = False) -> None:
    """Pipeline.warm_up's work (its docstring says what)."""
    report = report or (lambda message: None)
    started, rows = time.perf_counter(), pipe.engine.max_batch
    if background and pipe.predictors.compiled is not None and pipe.background is None:
        from omni_core.fast.background import compile_in_background
        pipe.background = compile_in_background(pipe, report)  # takes the units off until they are ready
    compiled = pipe.predictors.compiled if pipe.background is None else None
    pieces = [torch.no_grad()(frame) for frame in (compiled.pieces(rows) if compiled else [])]
    pieces += [step for stack_steps in (pipe.steps if compiled else []) for step in stack_steps.pieces(rows)]
    if pieces:
        report(f"{len(pieces)} compiled pieces to load (or, the first time, to compile): the predictor's steps "
               f"and the decoder layers for batches of up to {rows} rows")
    for i, piece in enumerate(pieces, 1):  # "[3/10] compiling the kv predictor's step (greedy) ..."
        pipe.engine.call(piece, lambda message, i=i: report(f"[{i}/{len(pieces)}] {message}"))
    pipe.engine.call(torch.no_grad()(pipe.predictors.warm_up), rows)  # CUDA graphs (the units: done above)
    mode = "chat" if pipe.abilities["chat"] else "speak"
    extra = {}
    if pipe.abilities["clone"]:  # a second of a tone: the clone path's encoders warm up too
        tone = 0.3 * np.sin(np.arange(SAMPLE_RATE) * 2 * np.pi * 220 / SAMPLE_RATE)
        extra = dict(reference_audio=(SAMPLE_RATE, tone.astype(np.float32)), reference_text="warm up")
    requests = time.perf_counter()
    for predictor in ("reprefill", "kv"):
        for do_sample in (False, True):
            pipe.generate(SpeechRequest("warm up", mode=mode, predictor=predictor, do_sample=do_sample,
                                        max_frames=3, max_text_tokens=3, **extra))
    if compiled is not None:
        report(f"warm-up done in {time.perf_counter() - started:.0f} s (the last {time.perf_counter() - requests:.0f} s: "
               f"a short request per decode path)")
