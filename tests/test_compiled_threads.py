"""Compiled predictor frames on 2 kernel threads (a Space's engine runs on every core): a row's floats are its
own there too. Its own file, so that the suite's two workers share the compiling (conftest's SLOW_FIRST: after
test_compiled_batches.py, while the other worker runs test_compiled.py and test_compiled_shapes.py)."""

from __future__ import annotations

import torch

from omni_core import load_pipeline


def test_each_row_of_a_compiled_predictor_frame_gets_its_floats_alone_on_two_threads():
    """A Space's engine runs on every core (2 here): on 2 kernel threads too, every row of a compiled KV frame
    of 4 rows (full, and 3 padded) equals its 1-row frame, floats included. Two things had broken it, each
    alone enough: ATen's attention kernel in the graph splits a query's keys across the threads by the call's
    batch, and inductor split a lone row's softmax sum over the 2048 codes across the threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the frames run in this thread, as in the engine's
    pipe = load_pipeline("tiny", device="cpu", compile=True, max_batch=4, threads=2)
    try:
        frames, width = pipe.predictors.compiled, pipe.talker.code_predictor.embedding_dim
        gen = torch.Generator().manual_seed(2)
        for rows in (4, 3, 4):
            h, e0 = torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)
            together = frames.run("kv", h, e0)
            for b in range(rows):
                alone = frames.run("kv", h[b:b + 1], e0[b:b + 1])
                for name, got, want in zip(("codes", "probs", "embeds", "top codes", "top probs"), together, alone):
                    assert torch.equal(got[b:b + 1], want), f"row {b} of {rows}: its {name} differ from its frame alone"
    finally:
        pipe.close()
        torch.set_num_threads(threads)
