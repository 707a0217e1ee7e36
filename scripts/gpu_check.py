"""The GPU check (issue 13), one process, one time budget: run by scripts/gpu_check.sh.

Sections, in order, each recorded in <out>/gpu.json as soon as it ends (a section that
fails records its error and the next one runs; one that would start past the budget is
skipped and says so):

  machine     GPU, driver-visible memory, torch / transformers / Python versions
  tests       pytest over the engine's test files, `-k cuda` (tests/test_cuda_graph.py and
              every test with cuda in its name); junit counts and the summary line. First after
              machine: correctness before speed, whatever the budget leaves
  predictor   the real-size code predictor (5 layers, hidden 1024, 2048 codes), per batch:
              ms per call (= one frame for every row) of HF generate, eager KV, eager
              re-prefill, the CUDA graph re-prefill (GraphPredictor)
  tts         Qwen3-TTS at the real widths (--tts: 0.6B and 1.7B, random weights drawn on the GPU): one
              request on re-prefill with and without the CUDA graph (codes compared) and on KV: first audio,
              RTF; then 1/8/16 at once in the page's mix (frames/s, first-audio p95); then int8 weights
  pipeline    load_pipeline(--model) (default: the full-size random-weight speech path),
              a warm-up request, then speak mode, --frames frames, re-prefill predictor with
              the CUDA graph: first audio, per-stage seconds (result.stats), RTF, peak memory
  concurrent  --concurrent requests at once from threads: wall time, each one's first audio
  compiled    the predictor's compiled KV frame (fast/compiled.py) per batch, while the budget lasts:
              compiling one batch size takes a minute or more, so it comes last

    python scripts/gpu_check.py                          # on the GPU, all of it
    python scripts/gpu_check.py --device cpu --model tiny --skip tests,compiled \\
        --batches 1 --frames 3 --repeats 1               # a dry run on a CPU (tests/test_gpu_check.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTIONS = ("machine", "tests", "predictor", "tts", "pipeline", "concurrent", "compiled")
# The test files with CUDA tests: cuda in the file's name or in a test's name. Only those are collected,
# since the device lacks the app's packages (Gradio, plotly, soundfile) that other files import.
CUDA_TEST = re.compile(r"^def test_\w*cuda", re.M)
FULL_SIZE = "random:qwen3-omni-30b-a3b"
TTS_SIZES = "random:qwen3-tts-0.6b,random:qwen3-tts-1.7b"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "bench_results", help="folder for gpu.json")
    p.add_argument("--budget-s", type=float, default=480.0, help="start no section after this many seconds")
    p.add_argument("--skip", default="", help=f"comma-separated sections to skip: {', '.join(SECTIONS)}")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    p.add_argument("--batches", default="1,8,16,32", help="predictor batch sizes")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per predictor case")
    p.add_argument("--model", default=FULL_SIZE, help="pipeline source for load_pipeline")
    p.add_argument("--frames", type=int, default=100, help="frames per pipeline request")
    p.add_argument("--concurrent", type=int, default=8, help="requests at once in the last section")
    p.add_argument("--tts", default=TTS_SIZES, help="comma-separated Qwen3-TTS sources for the tts section")
    p.add_argument("--tts-counts", default="1,8,16", help="requests at once in the tts section")
    p.add_argument("--tts-rounds", type=int, default=2, help="rounds of lone requests per way in the tts section")
    p.add_argument("--tests-timeout-s", type=float, default=240.0)
    args = p.parse_args(argv)
    args.skip = {s for s in args.skip.split(",") if s}
    args.tts = [s for s in args.tts.split(",") if s]
    unknown = args.skip - set(SECTIONS)
    if unknown:
        p.error(f"unknown section(s) in --skip: {', '.join(sorted(unknown))}; known: {', '.join(SECTIONS)}")
    for name in ("batches", "tts_counts"):
        try:
            setattr(args, name, [int(b) for b in getattr(args, name).split(",") if b])
        except ValueError:
            p.error(f"--{name.replace('_', '-')} must be comma-separated integers, got {getattr(args, name)!r}")
        if not getattr(args, name) or min(getattr(args, name)) < 1:
            p.error(f"--{name.replace('_', '-')} needs at least one size, each at least 1")
    if args.frames < 1 or args.repeats < 1 or args.concurrent < 1:
        p.error("--frames, --repeats and --concurrent must be at least 1")
    return args


class Report:
    """gpu.json, rewritten whole (atomically) after every section."""

    def __init__(self, out: str | Path):
        self.path = Path(out) / "gpu.json"
        self.data: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "sections": {}}

    def record(self, name: str, value) -> None:
        self.data["sections"][name] = value
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=_jsonable))
        tmp.replace(self.path)


def _jsonable(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    if hasattr(x, "to_dict"):
        return x.to_dict()
    return str(x)


def run_sections(args, report: Report, sections: dict) -> None:
    """Run each section in order within the budget; record results, errors and skips."""
    start = time.perf_counter()
    for name, fn in sections.items():
        elapsed = time.perf_counter() - start
        if name in args.skip:
            report.record(name, {"skipped": "--skip"})
            continue
        if elapsed > args.budget_s:
            report.record(name, {"skipped": f"budget: {elapsed:.0f} s of {args.budget_s:.0f} s used"})
            continue
        print(f"== {name} (at {elapsed:.0f} s)", flush=True)
        t0 = time.perf_counter()
        try:
            value = fn(args, deadline=start + args.budget_s)
        except Exception as e:  # one failing section must not cost the others
            traceback.print_exc()
            value = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        value["section_s"] = time.perf_counter() - t0
        report.record(name, value)
        print(json.dumps(value, indent=2, default=_jsonable)[:6000], flush=True)
    report.data["total_s"] = time.perf_counter() - start
    report.write()


# ---- sections -------------------------------------------------------------------------------

def machine(args, deadline: float) -> dict:
    import torch
    import transformers

    info = {"python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__,
            "transformers": transformers.__version__, "transformers_path": str(Path(transformers.__file__).parent),
            "cuda_available": torch.cuda.is_available(), "device": args.device, "dtype": args.dtype}
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        info.update(gpu=torch.cuda.get_device_name(), gpu_total_gb=total / 1e9, gpu_free_gb=free / 1e9,
                    cuda=torch.version.cuda)
    return info


def pytest_command(junit: Path) -> list[str]:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                   if "cuda" in p.name or CUDA_TEST.search(p.read_text()))
    return [sys.executable, "-m", "pytest", "-q", "-rfEs", "-k", "cuda", "--continue-on-collection-errors",
            f"--junitxml={junit}", *files]


def tests(args, deadline: float) -> dict:
    junit = Path(args.out) / "junit.xml"
    cmd = pytest_command(junit)
    timeout = max(30.0, min(args.tests_timeout_s, deadline - time.perf_counter()))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, output = "timeout", (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
            else (e.stdout or "")
    print(output[-8000:], flush=True)
    lines = [line for line in output.splitlines() if line.strip()]
    return {"command": " ".join(cmd[1:]), "returncode": rc, "summary": lines[-1] if lines else "",
            "counts": junit_counts(junit), "failures": [line for line in lines if line.startswith(("FAILED", "ERROR"))]}


def junit_counts(path: Path) -> dict:
    if not path.is_file():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} if suite is not None else {}


def predictor(args, deadline: float) -> dict:
    import torch

    from benchmarks.bench import interleaved, real_predictor
    from omni_core.models.code_predictor import predict_kv, predict_reprefill
    from omni_core.fast.predictors import Predictors

    dtype = getattr(torch, args.dtype)
    hf, cp = real_predictor(dtype, args.device)
    graph = Predictors(cp, torch.device(args.device)) if args.device.startswith("cuda") else None
    out: dict = {"dtype": args.dtype, "device": args.device, "graph": graph is not None, "batches": {}}
    for B in args.batches:
        h, e0 = predictor_inputs(cp, B, dtype, args.device)
        seq = torch.stack([h, e0], 1)
        cases = {"eager_kv": lambda: predict_kv(cp, h, e0), "eager_reprefill": lambda: predict_reprefill(cp, h, e0),
                 "hf_generate": lambda: hf.generate(inputs_embeds=seq, max_new_tokens=15, do_sample=False)}
        if graph is not None:
            greedy = [None] * B  # the engine's call: one row per request, all greedy
            cases["graph_reprefill"] = lambda: graph.run("reprefill", h, e0, greedy, use_graph=True)
        on_gpu = args.device.startswith("cuda")
        with torch.no_grad():
            # On CUDA in this thread: a fresh thread's first CUDA calls cost far more than the call itself.
            t = interleaved(cases, args.repeats, warmup=2, fresh_thread=not on_gpu)
            fresh = interleaved({"eager_kv": cases["eager_kv"]}, 3, warmup=0)["eager_kv"] if on_gpu else None
            same = None if graph is None else torch.equal(cases["graph_reprefill"]()[0], predict_reprefill(cp, h, e0)[0])
        out["batches"][str(B)] = {**_timings(t, B), "graph_codes_equal_eager": same,
                                  "eager_kv_ms_in_a_fresh_thread": fresh and 1000 * fresh}
        print(f"  batch {B}: " + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in t.items()), flush=True)
    return out


def _timings(seconds: dict, batch: int) -> dict:
    ms = {k: 1000 * v for k, v in seconds.items()}
    row = {"ms_per_call": ms, "ms_per_row": {k: v / batch for k, v in ms.items()}}
    if "graph_reprefill" in ms:
        row["graph_speedup_vs_eager_reprefill"] = ms["eager_reprefill"] / ms["graph_reprefill"]
    return row


def predictor_inputs(cp, batch: int, dtype, device: str):
    """h_talker and E(cb0), [B, 1024] each."""
    import torch
    h = torch.randn(batch, 1024, dtype=dtype, device=device)
    return h, cp.model.codec_embedding[0](torch.randint(0, 2048, (batch,), device=device))


def compiled(args, deadline: float) -> dict:
    """Compiled KV per batch size while the budget lasts (each size compiles once, first)."""
    import torch

    from benchmarks.bench import interleaved, real_predictor
    from omni_core.models.code_predictor import predict_kv
    from omni_core.fast.predictors import Predictors

    dtype = getattr(torch, args.dtype)
    _, cp = real_predictor(dtype, args.device)
    fns = Predictors(cp, torch.device(args.device), compiled=True)
    out = {"dtype": args.dtype, "device": args.device, "batches": {}}
    for B in args.batches:
        # A compile takes a minute or two: start one only if it ends before gpu_check.sh's hard stop
        # (60 s past the budget), which would lose this section's record.
        if time.perf_counter() > deadline - 120:
            out["batches"][str(B)] = {"skipped": "budget"}
            continue
        h, e0 = predictor_inputs(cp, B, dtype, args.device)
        greedy = [None] * B
        t0 = time.perf_counter()
        with torch.no_grad():
            fns.run("kv", h, e0, greedy)
            compile_s = time.perf_counter() - t0
            same = torch.equal(fns.run("kv", h, e0, greedy)[0], predict_kv(cp, h, e0)[0])
            t = interleaved({"compiled_kv": lambda: fns.run("kv", h, e0, greedy)}, args.repeats, warmup=2)
        out["batches"][str(B)] = {"compile_s": compile_s, "codes_equal_eager": same, **_timings(t, B)}
        print(f"  compiled kv batch {B}: {1000 * t['compiled_kv']:.2f} ms (compiled in {compile_s:.0f} s)", flush=True)
    return out


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


_PIPE = {}


def loaded_pipeline(args):
    """The pipeline of --model, loaded once for the pipeline and concurrent sections."""
    import torch

    from omni_core import load_pipeline

    if "pipe" not in _PIPE:
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        _PIPE["pipe"] = load_pipeline(args.model, device=args.device, dtype=args.dtype)
        _sync(args.device)
        _PIPE["load_s"] = time.perf_counter() - t0
    return _PIPE["pipe"]


TEXT = ("This is a long sentence, spoken by a model with random weights, so that the talker has "
        "text to read for every one of its frames while the benchmark runs.")


def speech_request(args, frames: int, seed: int = 0):
    from omni_core import SpeechRequest
    return SpeechRequest(TEXT, mode="speak", predictor="reprefill", cuda_graph=args.device.startswith("cuda"),
                         max_frames=frames, seed=seed)


def rtf(run: dict) -> float:
    """A timed_stream run's wall time over its audio's duration (80 ms per frame)."""
    return run["wall_s"] / (run["frames"] * 0.08)


def lone_figures(run: dict) -> dict:
    """What a lone request's timed_stream run reports: first audio, RTF, frames, per-stage ms."""
    return {"first_audio_ms": 1000 * run["first_audio_s"], "rtf": rtf(run), "frames": run["frames"],
            "stage_ms": run["stage_ms"]}


def timed_stream(pipe, request, device: str) -> dict:
    """One request through stream(): first audio as the caller sees it, and the result's stats."""
    from omni_core import AudioChunk, Done

    _sync(device)
    t0, first, result = time.perf_counter(), None, None
    for event in pipe.stream(request):
        if first is None and isinstance(event, AudioChunk):
            first = time.perf_counter() - t0
        if isinstance(event, Done):
            result = event.result
    _sync(device)
    stats = result.stats.to_dict() if hasattr(result.stats, "to_dict") else dataclasses.asdict(result.stats)
    return {"wall_s": time.perf_counter() - t0, "first_audio_s": first, "frames": int(result.codes.shape[0]),
            "stats": stats, "stage_ms": {k[:-2]: 1000 * stats[k] for k in ("thinker_s", "talker_s", "predictor_s",
                                                                            "codec_s", "total_s") if k in stats}}


def pipeline(args, deadline: float) -> dict:
    import torch

    pipe = loaded_pipeline(args)
    out = {"model": args.model, "load_s": _PIPE["load_s"], "info": pipe.info,
           "load_report": getattr(pipe, "load_report", None)}
    if args.device.startswith("cuda"):
        out["weights_gb_allocated"] = torch.cuda.memory_allocated() / 1e9
    out["warm_up"] = timed_stream(pipe, speech_request(args, min(5, args.frames)), args.device)  # graph capture
    runs = [timed_stream(pipe, speech_request(args, args.frames), args.device) for _ in range(2)]
    out["runs"] = runs
    out["first_audio_ms"] = 1000 * statistics.median(r["first_audio_s"] for r in runs)
    out["rtf"] = statistics.median(rtf(r) for r in runs)
    if args.device.startswith("cuda"):
        out["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def concurrent(args, deadline: float) -> dict:
    import torch

    pipe = loaded_pipeline(args)
    results: list = [None] * args.concurrent

    def one(i):
        try:
            results[i] = timed_stream(pipe, speech_request(args, args.frames, seed=i), args.device)
        except Exception as e:
            results[i] = {"error": f"{type(e).__name__}: {e}"}

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.concurrent)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    out = {"requests": args.concurrent, "wall_s": wall, "results": results,
           "frames_per_s": sum(r["frames"] for r in ok) / wall}
    if ok:
        out["first_audio_ms"] = sorted(1000 * r["first_audio_s"] for r in ok)
    if args.device.startswith("cuda"):
        out["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9
    return out


def tts_request(way: str, frames: int):
    """One greedy Qwen3-TTS request: 'graph' (re-prefill in the CUDA graph), 'reprefill' (eager) or 'kv'."""
    from omni_core import SpeechRequest
    predictor = "kv" if way == "kv" else "reprefill"
    return SpeechRequest(TEXT, predictor=predictor, cuda_graph=way == "graph", max_frames=frames)


def solo_summary(runs: list[dict]) -> dict:
    """Medians over rounds of one way's lone requests, and every round's figures."""
    per = [lone_figures(r) for r in runs]
    return {"first_audio_ms": statistics.median(p["first_audio_ms"] for p in per),
            "rtf": statistics.median(p["rtf"] for p in per), "rounds": per}


def tts(args, deadline: float) -> dict:
    """Per Qwen3-TTS source: a lone request three ways, then N at once (the page's mix), then int8 weights."""
    out = {}
    for source in args.tts:
        if time.perf_counter() > deadline - 30:
            out[source] = {"skipped": "budget"}
            continue
        try:
            out[source] = tts_size(args, source)
        except Exception as e:  # the next size still runs
            traceback.print_exc()
            out[source] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print(f"  {source}: " + json.dumps(out[source], default=_jsonable)[:3000], flush=True)
    return out


def tts_size(args, source: str) -> dict:
    import gc

    import torch

    from benchmarks.bench import page_mix, percentile, run_concurrently
    from omni_core import load_pipeline

    counts = args.tts_counts
    t0 = time.perf_counter()
    pipe = load_pipeline(source, device=args.device, dtype=args.dtype, max_batch=max(counts), max_waiting=max(counts))
    _sync(args.device)
    row: dict = {"load_s": time.perf_counter() - t0, "info": pipe.info}
    try:
        t0 = time.perf_counter()
        pipe.warm_up()  # every graph bucket up to max_batch, as a server starts: none is captured while timed
        row["warm_up_s"] = time.perf_counter() - t0
        ways = ("graph", "reprefill", "kv") if args.device.startswith("cuda") else ("reprefill", "kv")
        codes = {way: pipe.generate(tts_request(way, args.frames)).codes for way in ways}  # also the warm-up
        rounds = [{way: timed_stream(pipe, tts_request(way, args.frames), args.device) for way in ways}
                  for _ in range(args.tts_rounds)]  # interleaved: no way pays the others' first calls
        row["solo"] = {way: solo_summary([r[way] for r in rounds]) for way in ways}
        if "graph" in codes:
            row["graph_codes_equal_eager"] = bool((codes["graph"] == codes["reprefill"]).all())
        row["kv_codes_equal_reprefill"] = bool((codes["kv"] == codes["reprefill"]).all())
        row["at_once"] = {}
        run_concurrently(pipe, page_mix(max(counts), 3))  # the warm-up: the largest batch's first calls
        for n in counts:
            r = run_concurrently(pipe, page_mix(n, args.frames))
            row["at_once"][str(n)] = {"frames_per_s": r["frames_per_s"], "wall_s": r["wall_s"],
                                      "first_audio_p95_s": percentile(r["first_audio_s"], 0.95)}
        row["questions"] = open_questions(pipe, args)
        one = row["at_once"][str(counts[0])]["frames_per_s"]
        row["fps_over_one"] = {n: v["frames_per_s"] / one for n, v in row["at_once"].items()}
        if args.device.startswith("cuda"):
            row["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 1e9
    finally:
        pipe.close()
        del pipe
        gc.collect()
    row["int8"] = tts_int8(args, source)
    return row


def open_questions(pipe, args) -> dict:
    """What the first GPU run left unexplained: (1) one request of the page's mix ran at a third of a lone
    request's frames/s: the same request timed here, in this thread and from a fresh one; (2) a fresh thread's
    first CUDA calls cost more: the first audio of a request right after another, after the engine sat idle
    past IDLE_EXIT_S (its thread stays on a GPU: threads.idle_exit_s), and in a new engine thread."""
    from benchmarks.bench import page_mix, run_concurrently
    from omni_core.engine.threads import IDLE_EXIT_S, rest_engines

    mix_one = page_mix(1, args.frames)[0]
    here = timed_stream(pipe, mix_one, args.device)
    fresh = run_concurrently(pipe, [mix_one])
    warm = timed_stream(pipe, tts_request("graph", 3), args.device)
    idle = None
    if args.device.startswith("cuda"):  # (a CPU's thread ends after IDLE_EXIT_S: the dry run skips the wait)
        time.sleep(IDLE_EXIT_S + 1)  # a server between visitors
        idle = timed_stream(pipe, tts_request("graph", 3), args.device)
    rest_engines()  # the engine's thread ends, as it does on a CPU after IDLE_EXIT_S
    cold = timed_stream(pipe, tts_request("graph", 3), args.device)
    out = {"mix_one_frames_per_s_this_thread": here["frames"] / here["wall_s"],
           "mix_one_frames_per_s_fresh_thread": fresh["frames_per_s"],
           "first_audio_ms_engine_thread_warm": 1000 * warm["first_audio_s"],
           "first_audio_ms_engine_thread_new": 1000 * cold["first_audio_s"]}
    if idle is not None:
        out["first_audio_ms_after_idle"] = 1000 * idle["first_audio_s"]
    return out


def tts_int8(args, source: str) -> dict:
    """int8 weights: a lone greedy KV request's figures (lone_figures), or the error that refused them."""
    import gc

    from omni_core import load_pipeline
    try:
        pipe = load_pipeline(source, device=args.device, quantize="int8")
    except Exception as e:  # refused or unsupported on this device: say so
        return {"error": f"{type(e).__name__}: {e}"}
    try:
        pipe.generate(tts_request("kv", args.frames))  # the warm-up
        return lone_figures(timed_stream(pipe, tts_request("kv", args.frames), args.device))
    except Exception as e:
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    finally:
        pipe.close()
        del pipe
        gc.collect()


def main(argv=None) -> int:
    args = parse_args(argv)
    report = Report(args.out)
    report.data["args"] = {k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items()}
    run_sections(args, report, {"machine": machine, "tests": tests, "predictor": predictor, "tts": tts,
                                "pipeline": pipeline, "concurrent": concurrent, "compiled": compiled})
    print(f"wrote {report.path}", flush=True)
    failed = [n for n, v in report.data["sections"].items() if "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
