"""The real-width Qwen3-TTS codec's streaming chunks, with its largest convolutions packed for oneDNN and plain.

`random:qwen3-tts-0.6b`'s codec (random weights at the real widths), one stream, chunks of 1, 2, 4 and 8 frames
(a request's first chunks), in each dtype: ms per chunk, the two ways interleaved call by call (a fresh stream
per call, as a new request's), median over the calls; and the largest difference between the two ways' audio.
"plain" sets codec/packed.py's PACK_NUMEL past every weight, so every convolution takes F.conv1d /
F.conv_transpose1d.

--engine N: instead, the engine serving N requests at once (the page's mix, --frames each, 24 by default) in
the dtype, rounds alternating packed and plain in one process (`--compare keep`: packed.KEEP 4 and today's, a
lone request timed too; `--compare batched`: the codec batched and row by row, codec/backend.py, a lone request
timed too): the codec's ms per engine step (benchmarks.stages' timer of output.decode), the last first audio,
the aggregate frames/s. `--model tiny` runs it on the tiny model.

--streams: instead, streams one after another in one process, as a long-running engine's codec meets them, each
in the engine's chunks of a 60-frame request (1, 2, 4, 8, ..., then the rest), with packed.KEEP (the packed
lengths kept per weight) at 4 and at its value, alternating: each way from no packed copies, a first stream, then
the one timed: ms per chunk, median over the rounds.

    .venv/bin/python -m benchmarks.codec_chunks [--dtypes float32 bfloat16] [--repeats 9] [--engine 8 [--frames 24] [--compare pack|keep|batched] [--model tiny] | --streams]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time

import torch

from benchmarks.bench import machine
from omni_core import load_pipeline
from omni_core.codec import backend, packed
from omni_core.codec.streaming import StreamingDecoder

CHUNKS = (1, 2, 4, 8)
MODEL = "random:qwen3-tts-0.6b"


@contextlib.contextmanager
def keeping(keep: int):
    """Within: packed.KEEP copies kept per weight, from none (the copies of another KEEP dropped)."""
    saved = packed.KEEP
    packed.KEEP = keep
    packed._packed.clear()
    try:
        yield
    finally:
        packed.KEEP = saved


@contextlib.contextmanager
def packing(on: bool):
    """Within: the codec's large convolutions packed (on) or all plain (PACK_NUMEL past every weight)."""
    saved = packed.PACK_NUMEL
    packed.PACK_NUMEL = saved if on else 2**62
    try:
        yield
    finally:
        packed.PACK_NUMEL = saved


@contextlib.contextmanager
def batched(codec, on: bool):
    """Within: the codec batched (on) or row by row (backend.use_batched); as it was after."""
    was = backend.runs_batched(codec)
    backend.use_batched(codec, on)
    try:
        yield
    finally:
        backend.use_batched(codec, was)


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


def bench_engine(dtype: str, n: int, rounds: int, frames: int = 24, compare: str = "pack", model: str = MODEL) -> dict:
    """N at once through the engine, rounds alternating two ways (the order flipped each round): compare "pack",
    packed and plain; "keep", packed.KEEP 4 and today's, each from no copies and after a first round of its own
    (a long-running engine), the lone request (`page_mix`'s first) before the N; "batched", the codec batched
    and row by row, the lone request before the N."""
    from benchmarks.bench import page_mix, run_concurrently
    from benchmarks.stages import install
    from omni_core.engine.threads import rest_engines

    timers = install()
    pipe = load_pipeline(model, device="cpu", dtype=dtype, max_batch=n, max_waiting=n)
    ways = ({"packed": lambda: packing(True), "plain": lambda: packing(False)} if compare == "pack" else
            {"batched": lambda: batched(pipe.code2wav, True), "rows": lambda: batched(pipe.code2wav, False)}
            if compare == "batched" else {f"KEEP {k}": functools.partial(keeping, k) for k in (4, packed.KEEP)})
    names = list(ways)
    out = {name: [] for name in names}
    try:
        for name in names:  # warm-up: first calls, the packed copies of every length
            with ways[name]():
                run_concurrently(pipe, page_mix(n, frames))
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                with ways[name]():
                    if compare == "keep":  # from no copies: a first request meets every length
                        run_concurrently(pipe, page_mix(1, frames))
                    if compare != "pack":
                        one = run_concurrently(pipe, page_mix(1, frames))
                    timers.clear()
                    rest_engines()
                    run = run_concurrently(pipe, page_mix(n, frames))
                row = {"codec_ms_per_step": 1000 * timers.seconds["decode"] / max(timers.calls["step"], 1),
                       "steps": timers.calls["step"], "codec_calls": timers.calls["decode"],
                       "last_first_audio_s": max(run["first_audio_s"]), "frames_per_s": run["frames_per_s"]}
                if compare != "pack":
                    row.update(one_first_audio_s=one["first_audio_s"][0], one_frames_per_s=one["frames_per_s"])
                out[name].append(row)
                print(f"  {dtype} {n} at once, {name}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    finally:
        pipe.close()
    return {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in out.items()}


def engine_chunks(frames: int) -> list[int]:
    """A request's audio chunks, frames each (engine/output.py's `chunk_frames`, then the rest)."""
    from omni_core.engine.output import chunk_frames

    sizes: list[int] = []
    while sum(sizes) < frames:
        sizes.append(min(chunk_frames(len(sizes)), frames - sum(sizes)))
    return sizes


def stream_chunks(pipe, sizes: list[int], gen: torch.Generator) -> list[float]:
    """A new stream of random codes pushed in chunks of `sizes` frames: ms per push."""
    stream, row = StreamingDecoder(pipe.code2wav), []
    for n in sizes:
        codes = torch.randint(0, pipe.info["codebook_size"], (1, pipe.info["num_code_groups"], n), generator=gen)
        t0 = time.perf_counter()
        stream.push(codes)
        row.append(1000 * (time.perf_counter() - t0))
    return row


def bench_streams(dtype: str, repeats: int, frames: int = 60) -> dict:
    """Streams one after another, packed.KEEP at 4 and at its value alternating: ms per chunk (`--streams`)."""
    pipe = load_pipeline("random:qwen3-tts-0.6b", device="cpu", dtype=dtype)
    sizes, keeps = engine_chunks(frames), (4, packed.KEEP)
    times = {keep: [] for keep in keeps}
    gen = torch.Generator().manual_seed(0)
    try:
        for _ in range(repeats):
            for keep in keeps:
                with keeping(keep):  # from no copies: a first stream meets every length, then the one timed
                    times[keep].append([stream_chunks(pipe, sizes, gen) for _ in range(2)][1])
    finally:
        pipe.close()
    out = {}
    for keep, rows in times.items():
        out[f"KEEP {keep}"] = {f"chunk {i} ({n} frames)": statistics.median(row[i] for row in rows)
                               for i, n in enumerate(sizes)}
        out[f"KEEP {keep}"]["stream"] = statistics.median(sum(row) for row in rows)
        print(f"  {dtype} KEEP {keep}, ms: " + ", ".join(f"{k} {v:.1f}" for k, v in out[f"KEEP {keep}"].items()),
              flush=True)
    return out


def main(dtypes=("float32", "bfloat16"), repeats: int = 9, engine: int | None = None, streams: bool = False,
         frames: int = 24, compare: str = "pack", model: str = MODEL) -> dict:
    results = {"machine": machine(), "threads": torch.get_num_threads()}
    print(results["machine"], flush=True)
    for dtype in dtypes:
        if streams:
            results[dtype] = bench_streams(dtype, repeats)
            continue
        results[dtype] = (bench_engine(dtype, engine, repeats, frames, compare, model) if engine else
                          bench_dtype(dtype, repeats))
        if engine:
            print(f"{dtype}, medians: {results[dtype]}", flush=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=9, help="calls per chunk length (--engine: rounds)")
    parser.add_argument("--engine", type=int, default=None, help="N requests at once through the engine instead")
    parser.add_argument("--streams", action="store_true", help="streams one after another, KEEP 4 and today's")
    parser.add_argument("--frames", type=int, default=24, help="--engine: frames per request")
    parser.add_argument("--compare", default="pack", choices=["pack", "keep", "batched"],
                        help="--engine: packed against plain, KEEP 4 against today's, or batched against row by row")
    parser.add_argument("--model", default=MODEL, help="--engine: the model (tiny: the embedded one)")
    args = parser.parse_args()
    main(args.dtypes, args.repeats, args.engine, args.streams, args.frames, args.compare, args.model)
