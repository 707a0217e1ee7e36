"""(i) Qwen3-TTS at real sizes with random weights, on this CPU, against the official package (issue 19).

For each size (`random:qwen3-tts-0.6b`, `-1.7b`) and dtype (float32, bfloat16): one request
(batch 1), KV predictor, greedy, a fixed sentence for a fixed number of frames. From our
`result.stats` and the Frame events, per 80 ms frame:

  talker step   the talker's decode step and codebook-0 head, frames 1.. (frame 0 carries the prompt
                and the prefill: reported apart as `prefill_ms`)
  predictor     predictor_s / frames (codebooks 1..15)
  codec         codec_s / frames (streaming decode, chunks of 1, 2, 4, 8, 8, ... frames)
  steady        talker step + predictor + codec: a frame's work after the prefill
  total         submission to Done / frames; rtf = total_s / audio_s; first audio from submission

The memory floor is the weight bytes one frame reads ÷ the bytes per second a one-row bfloat16
`F.linear` reads its weight at, from memory (`read_bandwidth`), measured in the same run. Counted
(parameters and buffers: int8 weights count a byte each, and their scales):

  talker        every decoder layer, the final norm and codec_head once (one step); not the
                embeddings (a row each) nor the text projection (the prompt's, computed at admission)
  predictor     its layers, norm and small_to_mtp_projection (1.7B) 15 times (the KV frame: a
                2-row prefill and 14 steps), each of the 15 lm_heads once; not its embeddings (rows)
  codec         the decoder's weights once per chunk, spread over the frames (chunks as the engine
                makes them); its convolutions are compute-bound, so this part of the floor is loose

Beside ours, in the same interleaved run (ours, then theirs, each repeat), the official package
(`qwen-tts` in .venv-ref: scripts/setup_ref.sh) runs `generate_custom_voice` on the same weights in
a long-lived subprocess (benchmarks/tts_reference.py) that times its own calls: the whole wrapper
call, its generate, the predictor's part of that, the codec's decode. `speedup_end_to_end` is its
ms per frame over ours (submission to Done); `codes` says whether the greedy codes agree. Both
sides read one checkpoint written once by `ensure_random_tts` (bfloat16 on disk, the weights
`random:` draws, in the synthetic cache). By default the package runs on 0.6B only: 1.7B in
float32 is ~8 GB per side (~16 GB of RAM with both loaded) and the package's frames are slow here;
`--reference-sizes 0.6b 1.7b` adds it.
`--layers N` cuts the talker on both sides (the predictor and the codec keep theirs): a quick run,
not the real size.

Ways: a dtype, then /int8 for int8 weights (load_pipeline(quantize="int8")) and /codec1 for the codec in a
process of its own with one thread (codec_threads=1), e.g. bfloat16/int8/codec1. A size's ways are loaded
side by side and run interleaved with the package, round by round.

    .venv/bin/python -m benchmarks.tts [--quick] [--layers N] [--sizes 0.6b 1.7b] [--reference-sizes 0.6b]
        [--ways float32 bfloat16 bfloat16/int8]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
from pathlib import Path

import torch

from benchmarks.bench import interleaved, machine, print_section, write_results
from omni_core import SpeechRequest, load_pipeline
from omni_core.models.quant import MODES
from omni_core.engine.output import MAX_CHUNK_FRAMES
from omni_core.events import Done, Frame
from omni_core.synthetic.qwen3_tts import ensure_random_tts

ROOT = Path(__file__).resolve().parent.parent
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
REF_SCRIPT = ROOT / "benchmarks" / "tts_reference.py"
TEXT = "The quick brown fox jumps over the lazy dog, then rests in the shade of an old oak tree."
SPEAKER, LANGUAGE = "vivian", "english"


# ---- the package, as a subprocess --------------------------------------------------------------

class Reference:
    """benchmarks/tts_reference.py in .venv-ref: one JSON line in, one out. Its stderr (the package's
    warnings) goes to `log`."""

    def __init__(self, log: Path):
        if not REF_PYTHON.exists():
            raise RuntimeError("the package comparison needs .venv-ref: run scripts/setup_ref.sh "
                               "(or pass --reference-sizes with nothing to skip it)")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log, self.stderr = log, log.open("a")
        self.proc = subprocess.Popen([str(REF_PYTHON), str(REF_SCRIPT)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd=ROOT)

    def ask(self, op: str, **fields) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        reply = json.loads(line) if line else {"ok": False, "error": f"the package's process ended ({self.log})"}
        if not reply.pop("ok"):
            raise RuntimeError(f"qwen-tts {op} failed:\n{reply['error']}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.stderr.close()


# ---- one call each -------------------------------------------------------------------------------

def ours(pipe, frames: int) -> dict:
    """One greedy request through the engine: its stats, each frame's talker ms, its codes."""
    request = SpeechRequest(TEXT, speaker=SPEAKER, language=LANGUAGE, predictor="kv", do_sample=False,
                            max_frames=frames)
    talker_ms = []
    for event in pipe.stream(request):
        if isinstance(event, Frame):
            talker_ms.append(event.talker_ms)
        elif isinstance(event, Done):
            return {"stats": event.result.stats, "talker_ms": talker_ms, "codes": event.result.codes.tolist()}
    raise RuntimeError("the stream ended without a result")


def ours_per_frame(run: dict) -> dict:
    s, n = run["stats"], run["stats"].frames
    step = statistics.fmean(run["talker_ms"][1:]) if n > 1 else float("nan")
    predictor, codec = 1000 * s.predictor_s / n, 1000 * s.codec_s / n
    steady = step + predictor + codec
    prefill = run["talker_ms"][0]
    return {"talker_step_ms": step, "predictor_ms": predictor, "codec_ms": codec, "steady_ms": steady,
            "total_ms": 1000 * s.total_s / n, "rtf": s.rtf, "prefill_ms": prefill,
            "first_audio_ms": 1000 * s.first_audio_s,
            "first_audio_after_prefill_in_frames": (1000 * s.first_audio_s - prefill) / steady, "frames": n}


def theirs_per_frame(run: dict) -> dict:
    n = run["frames"]
    return {"talker_ms": 1000 * (run["generate_s"] - run["predictor_s"]) / n,  # its prefill included
            "predictor_ms": 1000 * run["predictor_s"] / n, "codec_ms": 1000 * run["decode_s"] / n,
            "total_ms": 1000 * run["seconds"] / n, "rtf": run["seconds"] / (0.08 * n), "frames": n}


def compare_codes(a: list, b: list) -> dict:
    """Greedy codes [T, 16] of the same request on both sides: equal, or how many cells differ."""
    differing = sum(x != y for fa, fb in zip(a, b) for x, y in zip(fa, fb))
    return {"equal": a == b, "differing_cells": differing, "frames": [len(a), len(b)]}


def medians(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


# ---- the floor ----------------------------------------------------------------------------------

def nbytes(module) -> int:
    """Weight bytes of `module`: parameters and buffers (int8 weights and their scales are buffers; None: an
    absent part, such as 0.6B's small_to_mtp_projection)."""
    if module is None:
        return 0
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def frame_bytes(pipe, frames: int) -> dict[str, int]:
    """Weight bytes one frame reads, by part (see the module docstring for what is counted)."""
    talker, cp = pipe.talker, pipe.talker.code_predictor
    chunks, done = 0, 0
    while done < frames:  # the engine's chunks: 1, 2, 4, 8, 8, ... frames
        done, chunks = done + min(2 ** chunks, MAX_CHUNK_FRAMES), chunks + 1
    predictor = 15 * (nbytes(cp.model.layers) + nbytes(cp.model.norm) + nbytes(cp.small_to_mtp_projection))
    return {"talker": nbytes(talker.model.layers) + nbytes(talker.model.norm) + nbytes(talker.codec_head),
            "predictor": predictor + nbytes(cp.lm_head),
            "codec": nbytes(pipe.code2wav.decoder) * chunks // frames}


def read_bandwidth(repeats: int = 7) -> float:
    """Bytes per second a one-row bfloat16 `F.linear` reads its weight at, weights out of the caches: 64
    distinct 1024x3072 weights (384 MB, past any last-level cache here) each multiplied by one row in turn."""
    weights = [torch.randn(1024, 3072).to(torch.bfloat16) for _ in range(64)]
    x = torch.randn(1, 3072).to(torch.bfloat16)

    def sweep():
        for w in weights:
            torch.nn.functional.linear(x, w)

    seconds = interleaved({"read": sweep}, repeats)["read"]
    return sum(w.numel() * w.element_size() for w in weights) / seconds


def floor(pipe, frames: int, bandwidth: float) -> dict:
    """The frame's weight bytes over `bandwidth` (read_bandwidth, measured in the same run)."""
    parts = frame_bytes(pipe, frames)
    ms = {k: 1000 * v / bandwidth for k, v in parts.items()}
    return {"bytes_per_frame": {**parts, "all": sum(parts.values())}, "read_GBps": bandwidth / 1e9,
            "floor_ms": {**ms, "all": sum(ms.values())}}


def over_floor(per_frame: dict, floor_ms: dict) -> dict:
    """Our ms per frame over the floor's, by part; `talker + predictor` leaves out the codec, whose
    floor is loose (compute-bound convolutions); `all` is the steady frame."""
    ours = {"talker": per_frame["talker_step_ms"], "predictor": per_frame["predictor_ms"],
            "codec": per_frame["codec_ms"]}
    ratios = {k: v / floor_ms[k] for k, v in ours.items()}
    ratios["talker + predictor"] = (ours["talker"] + ours["predictor"]) / (floor_ms["talker"] + floor_ms["predictor"])
    ratios["all"] = per_frame["steady_ms"] / floor_ms["all"]
    return ratios


# ---- one size, its ways interleaved --------------------------------------------------------------

def parse_way(way: str) -> dict:
    """A way's load_pipeline options: "bfloat16" → dtype; "/int8" ("/int4") adds quantize="int8"; "/codec1" a codec
    process of one thread (codec_threads=1), beside the engine's next step; "/compile" compiled decoding
    (warmed up before the rounds: a first start compiles for minutes, later ones load the packages)."""
    dtype, *extras = way.split("/")
    options = {"dtype": dtype}
    for extra in extras:
        if extra in MODES:
            options["quantize"] = extra
        elif extra == "compile":
            options["compile"] = True
        elif extra.startswith("codec"):
            options["codec_threads"] = int(extra.removeprefix("codec"))
        else:
            raise ValueError(f"unknown way {way!r}: dtype[/{'|/'.join(MODES)}][/codecN][/compile]")
    return options


def bench_size(size: str, ways: list[str], frames: int, repeats: int, layers: int | None,
               reference: Reference | None) -> dict:
    """Every way (dtype, optionally quantized) of one size loaded side by side and run interleaved, with the
    package (on the first way's dtype) in the same rounds. {way: its figures}."""
    name = f"qwen3-tts-{size}"
    source = str(ensure_random_tts(name, layers))  # every side reads the same folder
    loaded = None
    if reference is not None:
        loaded = reference.ask("load", model=source, dtype=parse_way(ways[0])["dtype"], threads=torch.get_num_threads())
    pipes = {}
    try:
        for way in ways:
            pipes[way] = load_pipeline(source, device="cpu", max_batch=1, **parse_way(way))
            if pipes[way].compiled:
                pipes[way].warm_up()
            print(f"   {way}: {pipes[way].load_report}", flush=True)
        runs: dict[str, list] = {way: [] for way in [*ways, "qwen-tts"]}
        cases = {way: (lambda w=way: runs[w].append(ours(pipes[w], frames))) for way in ways}
        if reference is not None:
            cases["qwen-tts"] = lambda: runs["qwen-tts"].append(reference.ask(
                "speak", text=TEXT, speaker=SPEAKER, language=LANGUAGE, max_frames=frames, codes=True))
        interleaved(cases, repeats)  # one warm-up call each, then every way in turn, each round
        bandwidth = read_bandwidth()
        theirs = medians([theirs_per_frame(r) for r in runs["qwen-tts"][1:]]) if reference is not None else None
        out = {}
        for way in ways:
            row = {"source": source, "talker_layers": pipes[way].config.talker.num_hidden_layers,
                   "ours_per_frame": medians([ours_per_frame(r) for r in runs[way][1:]]),
                   "floor": floor(pipes[way], frames, bandwidth)}
            row["ours_over_floor"] = over_floor(row["ours_per_frame"], row["floor"]["floor_ms"])
            if theirs is not None:
                row["package_load_s"], row["theirs_per_frame"] = loaded["load_s"], theirs
                row["speedup_end_to_end"] = theirs["total_ms"] / row["ours_per_frame"]["total_ms"]
                row["codes"] = compare_codes(runs[way][-1]["codes"], runs["qwen-tts"][-1]["codes"])
            out[f"{size} {way}"] = row
        return out
    finally:
        for pipe in pipes.values():
            pipe.close()
        pipes.clear()
        gc.collect()


# ---- report -------------------------------------------------------------------------------------

COLUMNS = (("talker", "ours_per_frame", "talker_step_ms"), ("pred", "ours_per_frame", "predictor_ms"),
           ("codec", "ours_per_frame", "codec_ms"), ("steady", "ours_per_frame", "steady_ms"),
           ("floor", "floor", "floor_ms", "all"), ("×floor", "ours_over_floor", "all"),
           ("×fl t+p", "ours_over_floor", "talker + predictor"),
           ("total", "ours_per_frame", "total_ms"), ("rtf", "ours_per_frame", "rtf"),
           ("1st audio", "ours_per_frame", "first_audio_ms"), ("pkg total", "theirs_per_frame", "total_ms"),
           ("pkg rtf", "theirs_per_frame", "rtf"), ("×faster", "speedup_end_to_end"))


def print_table(results: dict) -> None:
    """One row per size and dtype: ms per 80 ms frame unless named otherwise."""
    print("ms per 80 ms frame (ours: talker step, predictor, codec, steady = their sum, its memory floor;"
          " total = submission to Done);\n×floor = steady / floor, ×fl t+p = the same without the codec;"
          " 1st audio: ms from submission; pkg: qwen-tts; ×faster = pkg total / our total")
    print(f"{'case':<24}" + "".join(f"{c[0]:>10}" for c in COLUMNS))
    for case, row in results.items():
        if not isinstance(row, dict) or "ours_per_frame" not in row:
            continue
        cells = []
        for _, *path in COLUMNS:
            value = row
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            cells.append(f"{value:>10.2f}" if isinstance(value, float) else f"{'-':>10}")
        print(f"{case:<24}" + "".join(cells))


def main(quick: bool = False, json_path: str = "bench_results/tts.json", layers: int | None = None,
         sizes=("0.6b", "1.7b"), reference_sizes=("0.6b",), ways=("float32", "bfloat16"),
         frames: int | None = None) -> dict:
    frames = frames or (6 if quick else 24)
    repeats = 2 if quick else 5
    with_package = [s for s in sizes if s in reference_sizes]
    note = f"the package (qwen-tts) runs on {', '.join(with_package) or 'no size'}; the other sizes are ours only"
    if layers:
        note += f"; the talker is cut to {layers} layers on both sides: not the real size"
    results = {"machine": machine(), "text": TEXT, "speaker": SPEAKER, "language": LANGUAGE, "frames": frames,
               "repeats": repeats, "talker_layers_cut": layers, "package_sizes": with_package,
               "ours_only_sizes": [s for s in sizes if s not in with_package], "note": note}
    print(f"{results['machine']}\n{note}", flush=True)
    log = Path(json_path).with_suffix(".reference.log")  # the package's stderr, this run's only
    log.unlink(missing_ok=True)
    for size in sizes:
        print(f"-- {size}: {', '.join(ways)}", flush=True)
        reference = Reference(log) if size in reference_sizes else None
        try:
            results.update(bench_size(size, list(ways), frames, repeats, layers, reference))
        finally:
            if reference is not None:
                reference.close()
    print_table(results)
    write_results(results, json_path)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 frames, 2 repeats (a smoke run)")
    parser.add_argument("--layers", type=int, default=None, help="cut the talker to N layers on both sides")
    parser.add_argument("--frames", type=int, default=None, help="frames per request (default 24; --quick 6)")
    parser.add_argument("--sizes", nargs="*", default=["0.6b", "1.7b"])
    parser.add_argument("--reference-sizes", nargs="*", default=["0.6b"], help="sizes the package also runs")
    parser.add_argument("--ways", nargs="*", default=["float32", "bfloat16"],
                        help="dtype[/int8|/int4|/mixed][/codecN][/compile], e.g. bfloat16 bfloat16/int8 bfloat16/int8/codec1")
    parser.add_argument("--json", default="bench_results/tts.json")
    args = parser.parse_args()
    results = main(args.quick, args.json, args.layers, args.sizes, args.reference_sizes, args.ways, args.frames)
    print_section("i", results)
