"""`python -m omni_core bench`: omni_core against the HF reference, in one process.

Every comparison interleaves the contenders (A, B, C, A, B, C, ...) on the same
weights and reports medians and ratios from that one run: these machines are
shared and noisy, so only same-run ratios mean anything.

  (a) tiny model end to end: chat mode, greedy, 60 frames, each predictor vs HF generate
  (a) and (b) also run the torch.compile'd paths (fast/compiled.py); compiling happens before the
      timed calls ((a) reports how long it took)
  (b) code predictor at real size (5 layers, hidden 1024, 16/8 heads, FFN 3072, 2048 codes,
      16 groups), batch 1/4/16, float32 and bfloat16, vs HF code_predictor.generate; the
      memory floor is the weight bytes one frame reads (the layers once per step, 15 steps,
      and each lm_head once) ÷ the copy traffic (read + write bytes per second) of a copy
      with the weights' working set, measured in the same run
  (d) first audio and total time of a 120-frame utterance through stream()
  (c) Code2Wav per second of audio: our streaming decoder vs HF chunked_decode(300, 25)
  (e) CUDA only: the re-prefill predictor as a CUDA graph vs eager
  (f) many listeners: 1/4/8/16 simultaneous 60-frame requests, the batched engine (eager and
      compiled) vs the same engine serving one at a time: aggregate frames/s, first audio, RTF
  (g) the real-size predictor as the engine calls it: 8 requests' rows in one call vs 1
  (h) a lone request: the chosen invariant plans vs the old padding vs plain F.linear vs HF
      (benchmarks/lone_request.py)
  (i) Qwen3-TTS at real sizes (random weights), float32 and bfloat16, one greedy request: ms per
      frame for talker, predictor and codec, the memory floor, RTF, first audio, vs the official
      package's generate on the same weights in its own environment (benchmarks/tts.py)
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

import torch

from omni_core.engine.threads import in_passing_thread, rest_engines


def worktree(rev: str, under: Path) -> Path:
    """A git worktree of commit `rev` at under/tree-REV (made the first time), to run another commit's code."""
    import subprocess

    tree = under / f"tree-{rev}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=Path(__file__).resolve().parents[1],
                       check=True)
    return tree


def interleaved(cases: dict, repeats: int, warmup: int = 1, fresh_thread: bool = True) -> dict[str, float]:
    """Median seconds per call of each case, calls interleaved across cases. Each call runs `alone`."""
    for fn in cases.values():
        for _ in range(warmup):
            alone(fn, fresh_thread)
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            times[name].append(alone(fn, fresh_thread)[1])
    return {name: statistics.median(ts) for name, ts in times.items()}


def alone(fn, fresh_thread: bool = True):
    """fn() → (its result, its seconds), run with no other kernel threads alive in the process: after every
    engine thread has gone idle and ended, in a thread that ends with it (a reference model's kernels,
    run in the main thread, would leave an OpenMP team that slows every engine after it: engine/threads.py).
    fresh_thread=False runs it in the caller's thread: for CUDA work, whose first calls in a new thread cost
    far more than the call (the GPU check measured eager calls at about 1 s that way)."""
    rest_engines()

    def timed():
        _sync()
        t = time.perf_counter()
        out = fn()
        _sync()
        return out, time.perf_counter() - t

    return in_passing_thread(torch.get_num_threads(), timed) if fresh_thread else timed()


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def copy_bandwidth(working_set: int, device: str = "cpu", repeats: int = 7) -> float:
    """Memory traffic per second (bytes read + bytes written) of a tensor copy whose source and
    destination together span `working_set` bytes: sized like the weights, so the copy meets the
    same cache level the weights live in (here 308 MB of float32 weights fit the 480 MB L3)."""
    src = torch.ones(working_set // 8, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    t = interleaved({"copy": lambda: dst.copy_(src)}, repeats)["copy"]
    return 2 * src.numel() * 4 / t


# ---- (a) tiny end to end --------------------------------------------------------------------

def tiny_pair():
    """Our pipeline and the HF model on the same tiny checkpoint (CPU, float32), loaded in a thread that
    ends (engine/threads.py)."""
    return in_passing_thread(torch.get_num_threads(), _tiny_pair)


def _tiny_pair():
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from omni_core.pipeline import load_pipeline
    from omni_core.synthetic.tiny import ensure_tiny

    hf = Qwen3OmniMoeForConditionalGeneration.from_pretrained(ensure_tiny("tiny"), dtype=torch.float32).eval()
    return load_pipeline("tiny", device="cpu"), hf


def bench_end_to_end(repeats: int) -> dict:
    from omni_core.pipeline import load_pipeline
    from omni_core.request import SpeechRequest

    pipe, hf = tiny_pair()
    compiled = load_pipeline("tiny", device="cpu", compile=True, max_batch=1)  # one request: bucket 1
    t0 = time.perf_counter()
    compiled.warm_up()  # compiles every decode path (inductor's disk cache makes a rerun quicker)
    compile_s = time.perf_counter() - t0
    text, frames, tokens = "Tell me something about the weather today.", 60, 16
    ids = torch.tensor([pipe.chat_prompt(text)])

    def ours(predictor, p=pipe):
        return lambda: p.generate(SpeechRequest(text, mode="chat", predictor=predictor, max_frames=frames,
                                                max_text_tokens=tokens))

    def reference():
        hf.generate(input_ids=ids, speaker="ethan", thinker_max_new_tokens=tokens, thinker_do_sample=False,
                    thinker_eos_token_id=pipe.config.token_ids["im_end"], talker_max_new_tokens=frames + 1,
                    talker_do_sample=False)

    cases = {"omni_core reprefill": ours("reprefill"), "omni_core kv": ours("kv"),
             "omni_core reprefill compiled": ours("reprefill", compiled), "omni_core kv compiled": ours("kv", compiled),
             "hf": reference}
    t = interleaved(cases, repeats)
    return {"frames": frames, "seconds": t, "compile_s": compile_s,
            "speedup": {name: t["hf"] / t[name] for name in cases if name != "hf"}}


# ---- (b) real-size code predictor -----------------------------------------------------------

def real_predictor(dtype: torch.dtype, device: str):
    """`_real_predictor`, built in a thread that ends (engine/threads.py)."""
    return in_passing_thread(torch.get_num_threads(), _real_predictor, dtype, device)


def _real_predictor(dtype: torch.dtype, device: str):
    """HF's code predictor at Qwen3-Omni's real size (random weights) and ours with the same weights."""
    from transformers import Qwen3OmniMoeTalkerCodePredictorConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration as HFPredictor)

    from omni_core.loading.checkpoint import copy_state_dict
    from omni_core.models.code_predictor import CodePredictor
    from omni_core.models.config import DecoderConfig
    from omni_core.planner.choose import plan_linears

    hf_cfg = Qwen3OmniMoeTalkerCodePredictorConfig(
        vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, num_code_groups=16,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0})
    torch.manual_seed(0)
    hf = HFPredictor(hf_cfg).eval().to(device=device, dtype=dtype)
    ours = CodePredictor(DecoderConfig.from_hf(hf_cfg.to_dict()), 16).eval()
    copy_state_dict(ours, hf.state_dict())
    ours = ours.to(device=device, dtype=dtype)
    plan_linears([ours])  # as loading does: the batch-invariant kernel plan per shape
    return hf, ours


def frame_weight_bytes(cp) -> int:
    """Weight bytes one frame reads: the layers once per step (15 steps) and each lm_head once."""
    layers = sum(p.numel() * p.element_size() for p in cp.model.layers.parameters())
    heads = sum(p.numel() * p.element_size() for p in cp.lm_head.parameters())
    return 15 * layers + heads


def bench_predictor(repeats: int, device: str = "cpu", batches=(1, 4, 16), dtypes=("float32", "bfloat16"),
                    compiled_dtypes=("float32",)) -> dict:
    """Compiled KV only in `compiled_dtypes`: at this size each (dtype, batch) compiles for about
    three minutes on 2 cores the first time."""
    from omni_core.models.code_predictor import predict_kv, predict_reprefill
    from omni_core.fast.compiled import CompiledPredictors

    out = {}
    for name in dtypes:
        dtype = getattr(torch, name)
        hf, cp = real_predictor(dtype, device)
        compiled = CompiledPredictors(cp)
        weight_bytes = frame_weight_bytes(cp)
        bandwidth = copy_bandwidth(weight_bytes // 15, device)  # ≈ all the weights: the working set
        floor = weight_bytes / bandwidth  # a frame's weight reads at copy speed
        for B in batches:
            h = torch.randn(B, 1024, dtype=dtype, device=device)
            e0 = cp.model.codec_embedding[0](torch.randint(0, 2048, (B,), device=device))
            seq = torch.stack([h, e0], 1)
            cases = {"omni_core reprefill": lambda: predict_reprefill(cp, h, e0),
                     "omni_core kv": lambda: predict_kv(cp, h, e0),
                     "hf": lambda: hf.generate(inputs_embeds=seq, max_new_tokens=15, do_sample=False)}
            if name in compiled_dtypes:
                cases["omni_core kv compiled"] = lambda: compiled.run("kv", h, e0)  # the greedy-only frame
            with torch.no_grad():
                t = interleaved(cases, repeats)
            ours = [k for k in cases if k != "hf"]
            out[f"{name} batch {B}"] = {
                "seconds_per_call": t, "frames_per_s": {k: B / v for k, v in t.items()},
                "speedup": {k: t["hf"] / t[k] for k in ours}, "over_floor": {k: t[k] / floor for k in ours},
                "floor_s": floor, "weight_bytes_per_frame": weight_bytes, "copy_traffic_GBps": bandwidth / 1e9,
            }
        first, last = out[f"{name} batch {batches[0]}"], out[f"{name} batch {batches[-1]}"]
        out[f"{name} batching"] = {"batches": [batches[0], batches[-1]], "fps_ratio": {
            k: last["frames_per_s"][k] / first["frames_per_s"][k] for k in first["frames_per_s"]}}
    return out


# ---- (c) codec, (d) streaming latency --------------------------------------------------------

def bench_codec(repeats: int, frames: int = 125) -> dict:
    from omni_core.codec.streaming import StreamingDecoder

    pipe, hf = tiny_pair()
    codes = torch.randint(0, 2048, (1, 16, frames))
    seconds = frames * 0.08

    def streaming(chunk):
        def run():
            dec = StreamingDecoder(pipe.code2wav)
            for i in range(0, frames, chunk):
                dec.push(codes[..., i:i + chunk])
        return run

    with torch.no_grad():
        t = interleaved({"omni_core stream (1 frame)": streaming(1), "omni_core stream (4 frames)": streaming(4),
                         "omni_core whole": lambda: pipe.code2wav(codes),
                         "hf chunked_decode": lambda: hf.code2wav.chunked_decode(codes, 300, 25)}, repeats)
    return {"audio_s": seconds, "seconds_per_audio_second": {k: v / seconds for k, v in t.items()},
            "speedup_stream4": t["hf chunked_decode"] / t["omni_core stream (4 frames)"]}


def bench_stream_latency(repeats: int, frames: int = 120) -> dict:
    from omni_core.events import AudioChunk, Done
    from omni_core.pipeline import load_pipeline
    from omni_core.request import SpeechRequest

    pipe = load_pipeline("tiny", device="cpu")
    request = SpeechRequest("This sentence is long enough to be spoken for a while. " * 3, max_frames=frames)
    firsts, totals = [], []
    for _ in range(repeats + 1):
        t0, first = time.perf_counter(), None
        for event in pipe.stream(request):
            if first is None and isinstance(event, AudioChunk):
                first = time.perf_counter() - t0
            if isinstance(event, Done):
                assert event.result.stats.frames == frames
        firsts.append(first), totals.append(time.perf_counter() - t0)
    first, total = statistics.median(firsts[1:]), statistics.median(totals[1:])
    return {"frames": frames, "first_audio_s": first, "total_s": total, "first_over_total": first / total}


# ---- (f) many requests at once ------------------------------------------------------------------

def run_concurrently(pipe, requests) -> dict:
    """Start every request at the same moment (one thread each, as Gradio runs them); wall time,
    each request's first-audio latency and real-time factor, from its own start."""
    import threading

    from omni_core.events import AudioChunk, Done

    barrier = threading.Barrier(len(requests) + 1)
    firsts, rtfs, frames = [None] * len(requests), [None] * len(requests), [0] * len(requests)

    errors = []

    def run(i):
        barrier.wait()
        t0 = time.perf_counter()
        try:
            for event in pipe.stream(requests[i]):
                if firsts[i] is None and isinstance(event, AudioChunk):
                    firsts[i] = time.perf_counter() - t0
                if isinstance(event, Done):
                    frames[i] = event.result.stats.frames
                    rtfs[i] = (time.perf_counter() - t0) / event.result.stats.audio_s
        except Exception as exc:  # said after the join: a refused request is a broken measurement
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(requests)} requests failed: {errors[0]}") from errors[0]
    return {"wall_s": wall, "frames_per_s": sum(frames) / wall, "first_audio_s": firsts, "rtf": rtfs}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# the codec in a process of its own (engine/codec_process.py) on one of the cores, the engine on the rest
_SPLIT = dict(threads=max(1, torch.get_num_threads() - 1), codec_threads=1)
CONCURRENCY_WAYS = {"batched eager": {}, "batched compiled": dict(compile=True),
                    "batched eager, codec process": _SPLIT,
                    "batched compiled, codec process": dict(compile=True, **_SPLIT),
                    # every request is taken, all of them may be in line at once (the default line is 4 x max_batch)
                    "one at a time eager": dict(max_batch=1, max_waiting=64)}


def bench_concurrency(repeats: int, counts=(1, 4, 8, 16), frames: int = 60, eager: bool = False) -> dict:
    """N simultaneous speak-mode requests of `frames` frames on the tiny model (`page_mix`: the page's traffic),
    for the batched engine (eager and compiled, the codec in the engine's thread or in a process of its own) and, as the
    baseline, the same engine serving one request at a time (max_batch=1: each request runs alone, the
    rest wait). Rounds interleave the engines. eager: without the compiled engines (whose first warm-up
    compiles every bucket's frames and steps: the better part of an hour on 2 cores). The codec-process
    engines run in a process of their own, after the others: loading one moves its codec's weights into shared
    memory, which slows every tiny engine in its process (BENCHMARKS.md, "Many listeners"); ratios compare
    an engine with itself, in one process."""
    import concurrent.futures
    import multiprocessing

    names = [n for n, options in CONCURRENCY_WAYS.items() if not (eager and options.get("compile"))]
    shared = [n for n in names if "codec_threads" in CONCURRENCY_WAYS[n]]
    out = concurrency_ways(repeats, counts, frames, [n for n in names if n not in shared])
    if shared:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            apart = pool.submit(concurrency_ways, repeats, counts, frames, shared).result()
        for n in counts:
            out[f"{n} at once"].update(apart[f"{n} at once"])
    return out


def concurrency_ways(repeats: int, counts, frames: int, names: list[str]) -> dict:
    """`bench_concurrency` for the engines `names` (CONCURRENCY_WAYS), all in this process."""
    from omni_core.pipeline import load_pipeline

    engines = {name: load_pipeline("tiny", device="cpu", **CONCURRENCY_WAYS[name]) for name in names}
    for name, pipe in engines.items():
        if "compiled" in name:
            pipe.warm_up()
        run_concurrently(pipe, page_mix(2, 4))  # its first calls (a codec process's first chunk: ~1 s) go unmeasured
    out = {}
    for n in counts:
        requests = page_mix(n, frames)
        runs = {name: [] for name in engines}
        for _ in range(repeats):
            for name, pipe in engines.items():
                rest_engines()  # the last engine's thread has ended: this one's team is alone
                runs[name].append(run_concurrently(pipe, requests))
        out[f"{n} at once"] = {name: summarize(rs) for name, rs in runs.items()}
    for name in engines:
        alone = out[f"{counts[0]} at once"][name]
        for n in counts[1:]:
            row = out[f"{n} at once"][name]
            row["fps_over_one"] = row["frames_per_s"] / alone["frames_per_s"]
            row["first_audio_p95_over_one"] = row["first_audio_p95_s"] / alone["first_audio_p95_s"]
    for pipe in engines.values():
        pipe.close()
    return out


def page_mix(n: int, frames: int) -> list:
    """n requests like the page's traffic: half on the KV predictor and half on re-prefill, a third of them
    sampled with their own seeds."""
    from omni_core.request import SpeechRequest

    return [SpeechRequest(f"Listener number {i} is hearing this sentence.", max_frames=frames, seed=i,
                          predictor="kv" if i % 2 else "reprefill", do_sample=i % 3 == 2) for i in range(n)]


def summarize(runs: list[dict]) -> dict:
    """Medians over rounds of the aggregate frames/s, and the latencies pooled over rounds."""
    firsts = [f for r in runs for f in r["first_audio_s"]]
    rtfs = [x for r in runs for x in r["rtf"]]
    return {"frames_per_s": statistics.median(r["frames_per_s"] for r in runs),
            "first_audio_p50_s": percentile(firsts, 0.5), "first_audio_p95_s": percentile(firsts, 0.95),
            "rtf_p50": percentile(rtfs, 0.5), "rtf_max": max(rtfs)}


def bench_predictor_rows(repeats: int, batches=(1, 8)) -> dict:
    """The real-size predictor (float32) as the engine calls it: rows from B requests, one call
    (`Predictors.run`, each row with its own generator when sampling); ms per frame vs batch 1."""
    from omni_core.fast.predictors import Predictors

    _, cp = real_predictor(torch.float32, "cpu")
    eager, compiled = Predictors(cp, torch.device("cpu")), Predictors(cp, torch.device("cpu"), compiled=True)
    out = {}
    for B in batches:
        h = torch.randn(B, 1024)
        e0 = cp.model.codec_embedding[0](torch.randint(0, 2048, (B,)))
        greedy = [None] * B
        cases = {f"{kind} {name}": (lambda k=kind, p=preds: p.run(k, h, e0, greedy))
                 for kind in ("reprefill", "kv") for name, preds in (("eager", eager), ("compiled", compiled))
                 if not (kind == "reprefill" and name == "compiled")}
        with torch.no_grad():
            out[f"batch {B}"] = {k: 1000 * v for k, v in interleaved(cases, repeats).items()}
    first, last = out[f"batch {batches[0]}"], out[f"batch {batches[-1]}"]
    out["ms_ratio"] = {k: last[k] / first[k] for k in first}
    return out


# ---- (e) CUDA graphs ------------------------------------------------------------------------

def bench_cuda_graph(repeats: int) -> dict:
    from omni_core.models.code_predictor import predict_kv, predict_reprefill
    from omni_core.fast.cuda_graph import GraphPredictor

    out = {}
    for name in ("float32", "bfloat16"):
        _, cp = real_predictor(getattr(torch, name), "cuda")
        graph = GraphPredictor(cp)
        h = torch.randn(1, 1024, dtype=cp.lm_head[0].weight.dtype, device="cuda")
        e0 = cp.model.codec_embedding[0](torch.randint(0, 2048, (1,), device="cuda"))
        with torch.no_grad():
            noise, greedy = torch.ones(15, 1, 2048, device="cuda"), torch.ones(1, dtype=torch.bool, device="cuda")
            t = interleaved({"graph": lambda: graph.run(h, e0, noise, greedy), "eager reprefill":
                             lambda: predict_reprefill(cp, h, e0), "eager kv": lambda: predict_kv(cp, h, e0)},
                            repeats, warmup=3)
        out[name] = {"ms_per_frame": {k: 1000 * v for k, v in t.items()},
                     "graph_speedup_vs_eager_reprefill": t["eager reprefill"] / t["graph"]}
    return out


# ---- report ---------------------------------------------------------------------------------

def write_results(results: dict, json_path: str) -> None:
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    Path(json_path).write_text(json.dumps(results, indent=2))
    print(f"wrote {json_path}")


def bench_lone_request(quick: bool, json_path: str) -> dict:
    from benchmarks import lone_request  # it imports this module's helpers

    return lone_request.main(quick, json_path)


def bench_tts(quick: bool, json_path: str) -> dict:
    from benchmarks import tts  # it imports this module's helpers

    return tts.main(quick, json_path)


def bench_tts_int8(quick: bool, json_path: str) -> dict:
    """Qwen3-TTS 0.6B and 1.7B, one request: bfloat16, int8 weights, int8 with the codec in a process of its own,
    interleaved with the official package on 0.6B (benchmarks/tts.py)."""
    from benchmarks import tts  # it imports this module's helpers

    return tts.main(quick, json_path, sizes=("0.6b", "1.7b"), reference_sizes=("0.6b",),
                    ways=("bfloat16", "bfloat16/int8", "bfloat16/int8/codec1"))


def bench_tts_batched(quick: bool, json_path: str) -> dict:
    from benchmarks import tts_batched  # it imports this module's helpers

    return tts_batched.main(quick, json_path)


def machine() -> dict:
    flags = cpu_field("flags", "").split()
    info = {"platform": platform.platform(), "cpu": cpu_name(), "cpu_family": cpu_field("cpu family"),
            "native_bfloat16": "avx512_bf16" in flags or "amx_bf16" in flags,
            "torch": torch.__version__, "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def cpu_field(name: str, default: str | None = None) -> str | None:
    """A field of /proc/cpuinfo's first processor (Linux), or `default`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return default


def cpu_name() -> str:
    return cpu_field("model name") or platform.processor() or platform.machine()


def main(quick: bool = False, json_path: str = "bench_results/bench.json", gpu_only: bool = False,
         only: list[str] | None = None, eager: bool = False) -> int:
    reps = 3 if quick else 7
    results: dict = {"machine": machine()}
    print(results["machine"], flush=True)
    sections = [] if gpu_only else [
        ("a_end_to_end_tiny", lambda: bench_end_to_end(reps)),
        ("b_predictor_real_size", lambda: bench_predictor(reps)),
        ("c_codec", lambda: bench_codec(reps)),
        ("d_stream_latency", lambda: bench_stream_latency(reps)),
        ("f_concurrency", lambda: bench_concurrency(3 if quick else 5, eager=eager)),
        ("g_predictor_rows_real_size", lambda: bench_predictor_rows(reps)),
        ("h_lone_request", lambda: bench_lone_request(quick, json_path.replace(".json", "_h.json"))),
        ("i_tts_real_size", lambda: bench_tts(quick, json_path.replace(".json", "_i.json"))),
        ("l_tts_batched", lambda: bench_tts_batched(quick, json_path.replace(".json", "_l.json"))),
        ("q_tts_int8", lambda: bench_tts_int8(quick, json_path.replace(".json", "_q.json"))),
    ]
    if torch.cuda.is_available():
        sections.append(("e_cuda_graph", lambda: bench_cuda_graph(20 if quick else 50)))
    for key, run in sections:
        if only and not any(key.startswith(o) for o in only):
            continue
        print(f"== {key}", flush=True)
        results[key] = run()
        print_section(key, results[key])
    write_results(results, json_path)
    return 0


def print_section(key: str, data: dict, indent: str = "  ") -> None:
    for name, value in data.items():
        if isinstance(value, dict):
            print(f"{indent}{name}:")
            print_section(key, value, indent + "  ")
        elif isinstance(value, float):
            print(f"{indent}{name:<34} {value:10.4f}")
        else:
            print(f"{indent}{name:<34} {value}")
