"""The tiny engine before and after its process moves a tensor into shared memory, as a codec-process
pipeline does with its codec's weights at load (`CodecProcess`): frames/s of 1 and of 8 requests at once
(the page's mix, 60 frames), 3 runs each way, in one process.

    .venv/bin/python -m benchmarks.shared_memory [--mode share | free | new-shared] [--floats 1000000]

share: `torch.randn(n).share_memory_()`; free: a tensor of n floats made and dropped; new-shared: a new
shared storage of n floats, nothing copied into it.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.bench import machine, page_mix, rest_engines, run_concurrently
from omni_core.pipeline import load_pipeline


def touch(mode: str, n: int):
    """What the process does between the two measurements; the object is kept alive."""
    if mode == "share":
        return torch.randn(n).share_memory_()
    if mode == "new-shared":
        return torch.UntypedStorage._new_shared(4 * n)
    del_me = torch.randn(n)
    del del_me
    return None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("share", "free", "new-shared"), default="share")
    p.add_argument("--floats", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    pipe = load_pipeline("tiny", device="cpu")
    run_concurrently(pipe, page_mix(2, 10))  # its first calls
    out, kept = {}, None
    for phase in ("before", "after"):
        if phase == "after":
            kept = touch(args.mode, args.floats)
        rest_engines()
        out[phase] = {f"{n} at once": [round(run_concurrently(pipe, page_mix(n, 60))["frames_per_s"], 1)
                                       for _ in range(args.runs)] for n in (1, 8)}
    pipe.close()
    print(json.dumps({"machine": machine(), "mode": args.mode, "floats": args.floats, "frames_per_s": out,
                      "kept": kept is not None}, indent=2))


if __name__ == "__main__":
    main()
