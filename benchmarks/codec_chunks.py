"""The real-width Qwen3-TTS codec's streaming chunks, with its largest convolutions packed for oneDNN and plain.

`random:qwen3-tts-0.6b`'s codec (random weights at the real widths), one stream, chunks of 1, 2, 4 and 8 frames
(a request's first chunks), in each dtype: ms per chunk, the two ways interleaved call by call (a fresh stream
per call, as a new request's), median over the calls; and the largest difference between the two ways' audio.
"plain" sets codec/packed.py's PACK_NUMEL past every weight, so every convolution takes F.conv1d /
F.conv_transpose1d.

    .venv/bin/python -m benchmarks.codec_chunks [--dtypes float32 bfloat16] [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.bench import machine
from omni_core import load_pipeline
from omni_core.codec import packed
from omni_core.codec.streaming import StreamingDecoder

CHUNKS = (1, 2, 4, 8)


def decode_chunk(codec, codes: torch.Tensor, pack: bool) -> tuple[torch.Tensor, float]:
    """One fresh stream's first push of `codes` [1, Q, n]: (its audio, its seconds)."""
    saved = packed.PACK_NUMEL
    packed.PACK_NUMEL = saved if pack else 2**62
    try:
        t0 = time.perf_counter()
        wav = StreamingDecoder(codec).push(codes)
        return wav, time.perf_counter() - t0
    finally:
        packed.PACK_NUMEL = saved


def bench_dtype(dtype: str, repeats: int) -> dict:
    pipe = load_pipeline("random:qwen3-tts-0.6b", device="cpu", dtype=dtype)
    codec = pipe.code2wav
    out = {}
    try:
        for n in CHUNKS:
            codes = torch.randint(0, pipe.info["codebook_size"], (1, pipe.info["num_code_groups"], n),
                                  generator=torch.Generator().manual_seed(n))
            for pack in (True, False):  # warm-up: the packed copy for this length, first calls
                decode_chunk(codec, codes, pack)
            times = {"packed": [], "plain": []}
            for _ in range(repeats):
                for name, pack in (("packed", True), ("plain", False)):
                    wav, seconds = decode_chunk(codec, codes, pack)
                    times[name].append(seconds)
                    if pack:
                        packed_wav = wav
                    else:
                        plain_wav = wav
            row = {k: 1000 * statistics.median(v) for k, v in times.items()}
            row["plain_over_packed"] = row["plain"] / row["packed"]
            row["max_abs_diff"] = float((packed_wav.float() - plain_wav.float()).abs().max())
            out[f"{n} frames"] = row
            print(f"  {dtype} {n} frames: packed {row['packed']:.1f} ms, plain {row['plain']:.1f} ms "
                  f"({row['plain_over_packed']:.2f}x), max |diff| {row['max_abs_diff']:.3g}", flush=True)
    finally:
        pipe.close()
    return out


def main(dtypes=("float32", "bfloat16"), repeats: int = 9) -> dict:
    results = {"machine": machine(), "threads": torch.get_num_threads()}
    print(results["machine"], flush=True)
    for dtype in dtypes:
        results[dtype] = bench_dtype(dtype, repeats)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    main(args.dtypes, args.repeats)
