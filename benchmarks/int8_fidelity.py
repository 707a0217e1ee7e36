"""What int8, mixed and int4 weights change: Qwen3-TTS at real widths (random weights), against the unquantized model.

For each size, five pipelines on one checkpoint (bfloat16 on disk): float32, bfloat16, and bfloat16 with
int8, mixed or int4 weights (`quantize="int8"`, `"mixed"`, `"int4"`). The bfloat16 model makes a greedy take (KV predictor); then each model
scores that take teacher-forced (`Pipeline.score(..., keep=True)`: every codebook's whole distribution at
every frame, given the same past codes), and:

  KL            mean over frames of KL(bfloat16 ‖ other) per codebook, in nats
  top-1         the share of cells where the other model's most probable code is bfloat16's
  greedy codes  the other model's own greedy take against bfloat16's: cells equal, first frame that differs
  log-mel       mean |log-mel| distance (dB, app/roundtrip.mel_distance) of the other's greedy audio
                against bfloat16's

float32 against bfloat16 is the yardstick: the change that bfloat16 itself makes to the same weights. A
quantized figure near it is within the noise a precision change brings anyway.

    .venv/bin/python -m benchmarks.int8_fidelity [--sizes 0.6b 1.7b] [--frames 24]
"""

from __future__ import annotations

import argparse
import gc

import numpy as np

from app.roundtrip import mel_distance
from benchmarks.bench import machine, write_results
from omni_core import SpeechRequest, load_pipeline
from omni_core.synthetic.qwen3_tts import ensure_random_tts

TEXT = "The quick brown fox jumps over the lazy dog, then rests in the shade of an old oak tree."
WAYS = {"bfloat16": dict(dtype="bfloat16"),  # first: its take is the one the others score
        "int8": dict(dtype="bfloat16", quantize="int8"), "mixed": dict(dtype="bfloat16", quantize="mixed"),
        "int4": dict(dtype="bfloat16", quantize="int4"), "float32": dict(dtype="float32")}
EPS = 1e-12  # a probability the other model gives zero is taken as this (log of it stays finite)


def kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p ‖ q) over the last axis, in nats: [..., V] → [...]."""
    mask = p > 0
    terms = np.where(mask, p * (np.log(np.where(mask, p, 1)) - np.log(np.maximum(q, EPS))), 0.0)
    return terms.sum(-1)


def compare(base, other, base_take, other_take, sample_rate: int) -> dict:
    """Figures of `other` against `base` (scores of base's take; each model's own greedy take)."""
    per_cell_kl = kl(base.distributions.astype(np.float64), other.distributions.astype(np.float64))  # [T, 16]
    agree = base.distributions.argmax(-1) == other.distributions.argmax(-1)  # [T, 16]
    n = min(len(base_take.codes), len(other_take.codes))
    same = base_take.codes[:n] == other_take.codes[:n]
    differing = np.flatnonzero(~same.all(axis=1))
    return {"kl_per_codebook": [round(float(v), 6) for v in per_cell_kl.mean(0)],
            "kl_mean": float(per_cell_kl.mean()), "kl_cb0": float(per_cell_kl[:, 0].mean()),
            "kl_cb1_15": float(per_cell_kl[:, 1:].mean()),
            "top1_agreement": float(agree.mean()), "top1_agreement_cb0": float(agree[:, 0].mean()),
            "greedy_cells_equal": float(same.mean()),
            "greedy_first_differing_frame": int(differing[0]) if differing.size else None,
            "log_mel_distance_db": mel_distance(base_take.audio, other_take.audio, sample_rate)}


def run_way(source: str, way: str, request, base_codes):
    """One way's greedy take and its teacher-forced score of `base_codes` (its own take's when None); the
    pipeline is closed and dropped on return (the sizes' pipelines never overlap in memory)."""
    with load_pipeline(source, device="cpu", max_batch=1, **WAYS[way]) as pipe:
        print(f"   {way}: {pipe.load_report}", flush=True)
        take = pipe.generate(request)
        score = pipe.score(take.codes if base_codes is None else base_codes, request, keep=True)
        return take, score, pipe.info["sample_rate"]


def bench_size(size: str, frames: int) -> dict:
    source = str(ensure_random_tts(f"qwen3-tts-{size}"))
    request = SpeechRequest(TEXT, speaker="vivian", language="english", predictor="kv", max_frames=frames)
    takes, scores = {}, {}
    for way in WAYS:
        base = takes["bfloat16"].codes if takes else None
        takes[way], scores[way], rate = run_way(source, way, request, base)
        gc.collect()
    return {other: compare(scores["bfloat16"], scores[other], takes["bfloat16"], takes[other], rate)
            for other in list(WAYS)[1:]}


def main(sizes=("0.6b", "1.7b"), frames: int = 24, json_path: str = "bench_results/int8_fidelity.json") -> dict:
    results = {"machine": machine(), "frames": frames, "text": TEXT}
    print(results["machine"], flush=True)
    for size in sizes:
        print(f"-- {size}", flush=True)
        results[size] = bench_size(size, frames)
        print_table({size: results[size]})
        write_results(results, json_path)  # each size as it is done
    return results


def print_table(rows: dict) -> None:
    print(f"{'case':<16}{'KL mean':>10}{'KL CB0':>10}{'KL 1-15':>10}{'top-1':>8}{'top-1 CB0':>10}"
          f"{'greedy =':>10}{'1st diff':>9}{'log-mel dB':>11}", flush=True)
    for size, others in rows.items():
        for other, row in others.items():
            print(f"{size + ' ' + other:<16}{row['kl_mean']:>10.5f}{row['kl_cb0']:>10.5f}{row['kl_cb1_15']:>10.5f}"
                  f"{row['top1_agreement']:>8.3f}{row['top1_agreement_cb0']:>10.3f}{row['greedy_cells_equal']:>10.3f}"
                  f"{str(row['greedy_first_differing_frame']):>9}{row['log_mel_distance_db']:>11.2f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["0.6b", "1.7b"])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--json", default="bench_results/int8_fidelity.json")
    args = parser.parse_args()
    main(args.sizes, args.frames, args.json)
