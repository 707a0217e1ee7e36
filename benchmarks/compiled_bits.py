"""Which single ops a compiled graph computes with eager's bits (issue 59: compiled codes against eager's).

Each op alone, compiled as a unit is compiled (units.py: `dynamic=True`, the C++ wrapper, one kernel thread),
with inductor's `emulate_precision_casts` off and on; called on random inputs at Qwen3-TTS 0.6B's widths, its
output compared bit for bit with eager's. Prints how many inputs differ per op and setting.

    .venv/bin/python -m benchmarks.compiled_bits [--inputs 200]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch._inductor.config
import torch.nn.functional as F

from benchmarks.bench import machine
from omni_core.fast.packages import CPU_KERNELS
from omni_core.models.layers import apply_rope, rms_norm

OPTIONS = {"cpp_wrapper": True, **CPU_KERNELS}


def norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return rms_norm(x, weight, 1e-6)  # the layers' (eps a constant, as in a layer's graph)


def softmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.float().softmax(-1)  # sampling's, and attention's in float32


def gating(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up  # the MLP's


def cases() -> dict:
    """name → (op, a function drawing one input tuple)."""
    bf16 = torch.bfloat16
    return {
        "bfloat16 rms_norm [1, 1, 1024]": (norm, lambda: (torch.randn(1, 1, 1024, dtype=bf16),
                                                         (1 + 0.1 * torch.randn(1024)).to(bf16))),
        "float32 rms_norm [1, 1, 1024]": (norm, lambda: (torch.randn(1, 1, 1024), 1 + 0.1 * torch.randn(1024))),
        "softmax of bfloat16 logits [1, 2048]": (softmax, lambda: (3 * torch.randn(1, 2048, dtype=bf16),)),
        "rotation, bfloat16 [1, 24, 1, 128]": (apply_rope, lambda: (torch.randn(1, 24, 1, 128, dtype=bf16),
                                                                    torch.randn(1, 128, dtype=bf16),
                                                                    torch.randn(1, 128, dtype=bf16))),
        "silu(gate) * up, bfloat16 [1, 1, 3072]": (gating, lambda: (torch.randn(1, 1, 3072, dtype=bf16),
                                                                    torch.randn(1, 1, 3072, dtype=bf16))),
    }


def differing(op, draw, inputs: int, emulate: bool) -> int:
    """How many of `inputs` random calls give other bits compiled than eager."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(emulate_precision_casts=emulate), torch.no_grad():
        compiled = torch.compile(op, fullgraph=True, dynamic=True, options=OPTIONS)
        count = 0
        for _ in range(inputs):
            args = draw()
            count += not torch.equal(op(*args), compiled(*args))
    return count


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=200)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out = {"machine": machine(), "inputs": args.inputs, "differ": {}}
    for name, (op, draw) in cases().items():
        out["differ"][name] = {setting: differing(op, draw, args.inputs, emulate)
                               for setting, emulate in (("plain", False), ("emulate_precision_casts", True))}
        print(name, out["differ"][name], flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
