"""The Qwen3-TTS oracle's greedy takes with the raw logits the package computed for each frame (its talker's
codec head: CB0; its code predictor's heads: CB1..15), for the teacher-forced fidelity tests
(tests/test_fidelity.py): the official per-frame distributions of the official codes. Runs in .venv-ref beside
qwen_tts_oracle.py (whose checkpoints, loading and requests it uses) and never imports omni_core.

    run MODEL REQUESTS.json OUT.npz [--dtype D]    OUT: codes_i [T, 16], audio_i, logits0_i [T, V0], logits_i [T, 15, V]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from qwen_tts_oracle import generate, load, spy  # noqa: E402


def run(folder: Path, requests: list[dict], dtype: str) -> dict[str, np.ndarray]:
    tts = load(folder, dtype)
    captured: dict[str, object] = {}
    spy(tts.model, "generate", captured, "codes")
    talker = tts.model.talker
    got0: list = []
    got: list[list] = [[] for _ in talker.code_predictor.lm_head]
    talker.codec_head.register_forward_hook(lambda m, i, o: got0.append(o[0, -1].float().clone()))
    for j, head in enumerate(talker.code_predictor.lm_head):
        head.register_forward_hook(lambda m, i, o, j=j: got[j].append(o[0, -1].float().clone()))
    out: dict[str, np.ndarray] = {}
    for i, req in enumerate(requests):
        captured.clear()
        got0.clear()
        for g in got:
            g.clear()
        wavs, _ = generate(tts, req)
        codes = captured["codes"][0][0].cpu().numpy().astype(np.int64)
        T = len(codes)
        out[f"codes_{i}"], out[f"audio_{i}"] = codes, np.asarray(wavs[0], dtype=np.float32)
        out[f"logits0_{i}"] = torch.stack(got0[:T]).numpy()
        out[f"logits_{i}"] = torch.stack([torch.stack(g[:T]) for g in got], 1).numpy()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run"])
    parser.add_argument("model", type=Path)
    parser.add_argument("requests", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    np.savez(args.out, **run(args.model, json.loads(args.requests.read_text()), args.dtype))


if __name__ == "__main__":
    sys.exit(main())
