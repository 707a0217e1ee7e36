"""The real-width Qwen3-TTS codec's streaming chunks, with its largest convolutions packed for oneDNN and plain.

`random:qwen3-tts-0.6b`'s codec (random weights at the real widths), one stream, chunks of 1, 2, 4 and 8 frames
(a request's first chunks), in each dtype: ms per chunk, the two ways interleaved call by call (a fresh stream
per call, as a new request's), median over the calls; and the largest difference between the two ways' audio.
"plain" sets codec/packed.py's PACK_NUMEL past every weight, so every convolution takes F.conv1d /
F.conv_transpose1d.

--engine N: instead, the engine serving N requests at once (the page's mix, 24 frames each) in the dtype,
rounds alternating packed and plain in one process: the codec's ms per engine step (benchmarks.stages' timer
of output.decode), the last first audio, the aggregate frames/s.

    .venv/bin/python -m benchmarks.codec_chunks [--dtypes float32 bfloat16] [--repeats 9] [--engine 8]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from benchmarks.bench import machine
from omni_core import load_pipeline
from omni_core.codec import packed
from omni_core.codec.streaming import StreamingDecoder

CHUNKS = (1, 2, 4, 8)


@contextlib.contextmanager
def packing(on: bool):
    """Within: the codec's large convolutions packed (on) or all plain (PACK_NUMEL past every weight)."""
    saved = packed.PACK_NUMEL
    packed.PACK_NUMEL = saved if on else 2**62
    try:
        yield
    finally:
        packed.PACK_NUMEL = saved


def decode_chunk(codec, codes: torch.Tensor, pack: bool) -> tuple[torch.Tensor, float]:
    """One fresh stream's first push of `codes` [1, Q, n]: (its audio, its seconds)."""
    with packing(pack):
        t0 = time.perf_counter()
        wav = StreamingDecoder(codec).push(codes)
        return wav, time.perf_counter() - t0


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
            times, wavs = {"packed": [], "plain": []}, {}
            for _ in range(repeats):
                for name, pack in (("packed", True), ("plain", False)):
                    wavs[name], seconds = decode_chunk(codec, codes, pack)
                    times[name].append(seconds)
            row = {k: 1000 * statistics.median(v) for k, v in times.items()}
            row["plain_over_packed"] = row["plain"] / row["packed"]
            row["max_abs_diff"] = float((wavs["packed"].float() - wavs["plain"].float()).abs().max())
            out[f"{n} frames"] = row
            print(f"  {dtype} {n} frames: packed {row['packed']:.1f} ms, plain {row['plain']:.1f} ms "
                  f"({row['plain_over_packed']:.2f}x), max |diff| {row['max_abs_diff']:.3g}", flush=True)
    finally:
        pipe.close()
    return out


def bench_engine(dtype: str, n: int, rounds: int, frames: int = 24) -> dict:
    """N at once through the engine, rounds alternating packed and plain (the order flipped each round)."""
    from benchmarks.bench import page_mix, run_concurrently
    from benchmarks.stages import install
    from omni_core.engine.threads import rest_engines

    timers = install()
    pipe = load_pipeline("random:qwen3-tts-0.6b", device="cpu", dtype=dtype, max_batch=n, max_waiting=n)
    out = {"packed": [], "plain": []}
    try:
        for pack in (True, False):  # warm-up: first calls, the packed copies of every length
            with packing(pack):
                run_concurrently(pipe, page_mix(n, frames))
        for r in range(rounds):
            for name in ("packed", "plain") if r % 2 == 0 else ("plain", "packed"):
                timers.clear()
                rest_engines()
                with packing(name == "packed"):
                    run = run_concurrently(pipe, page_mix(n, frames))
                row = {"codec_ms_per_step": 1000 * timers.seconds["decode"] / max(timers.calls["step"], 1),
                       "last_first_audio_s": max(run["first_audio_s"]), "frames_per_s": run["frames_per_s"]}
                out[name].append(row)
                print(f"  {dtype} {n} at once, {name}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    finally:
        pipe.close()
    return {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in out.items()}


def main(dtypes=("float32", "bfloat16"), repeats: int = 9, engine: int | None = None) -> dict:
    results = {"machine": machine(), "threads": torch.get_num_threads()}
    print(results["machine"], flush=True)
    for dtype in dtypes:
        results[dtype] = bench_engine(dtype, engine, repeats) if engine else bench_dtype(dtype, repeats)
        if engine:
            print(f"{dtype}, medians: {results[dtype]}", flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=9, help="calls per chunk length (--engine: rounds)")
    parser.add_argument("--engine", type=int, default=None, help="N requests at once through the engine instead")
    args = parser.parse_args()
    main(args.dtypes, args.repeats, args.engine)
