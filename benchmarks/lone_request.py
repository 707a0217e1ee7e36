"""(h) A lone request with batch invariance at a lone row's speed (issue 17).

Every comparison runs interleaved in one process on the same weights:

  h1  the real-size code predictor (5 layers × 1024, 16 groups), KV, one request (batch 1):
      ms per frame with the plans chosen at load, with the old padding (every call padded to 16
      rows), with no invariance at all (plain F.linear), and HF's code_predictor.generate; float32
      and bfloat16; the compiled KV frame (float32); the memory floor; batch 8 and 16 per frame.
  h2  the tiny model end to end (chat, 60 frames), one request: eager with the chosen plans, the
      old padding and plain F.linear; compiled; HF generate.

    .venv/bin/python -m benchmarks.lone_request [--quick]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench import (copy_bandwidth, frame_weight_bytes, interleaved, machine, print_section, real_predictor,
                              write_results)
from omni_core.engine.threads import in_passing_thread
from omni_core.models.invariant import PLAIN, SAFE, Plan, use_plan
from omni_core.planner.choose import plan_linears


def use(modules, plan: Plan | None, chosen: dict) -> None:
    """Give every matmul in `modules` `plan`, or (None) the plan chosen for its shape."""
    if plan is None:
        plan_linears(modules, chosen)
    else:
        use_plan(modules, plan)


def variants(modules, chosen: dict):
    """(name, setter) for the three ways of running the matmuls."""
    return [("chosen plans", lambda: use(modules, None, chosen)), ("padded to 16 (old)", lambda: use(modules, SAFE, chosen)),
            ("plain F.linear (not invariant)", lambda: use(modules, PLAIN, chosen))]


def switching(setter, fn):
    def run():
        setter()
        return fn()
    return run


def bench_real_predictor(repeats: int, dtypes=("float32", "bfloat16"), batches=(1, 8, 16)) -> dict:
    from omni_core.fast.compiled import CompiledPredictors
    from omni_core.models.code_predictor import predict_kv

    out = {}
    for name in dtypes:
        dtype = getattr(torch, name)
        hf, cp = real_predictor(dtype, "cpu")
        chosen: dict = {}
        in_passing_thread(torch.get_num_threads(), plan_linears, [cp], chosen)
        weight_bytes = frame_weight_bytes(cp)
        floor = weight_bytes / copy_bandwidth(weight_bytes // 15)
        compiled = CompiledPredictors(cp) if name == "float32" else None
        for B in batches:
            h = torch.randn(B, 1024, dtype=dtype)
            e0 = cp.model.codec_embedding[0](torch.randint(0, 2048, (B,)))
            seq = torch.stack([h, e0], 1)
            cases = {f"kv eager, {v}": switching(setter, lambda: predict_kv(cp, h, e0))
                     for v, setter in variants([cp], chosen) if B == 1 or v == "chosen plans"}
            if compiled is not None and B == 1:
                cases["kv compiled, chosen plans"] = switching(lambda: use([cp], None, chosen),
                                                               lambda: compiled.run("kv", h, e0))  # greedy-only frame
            cases["hf generate"] = lambda: hf.generate(inputs_embeds=seq, max_new_tokens=15, do_sample=False)
            with torch.no_grad():
                t = interleaved(cases, repeats)
            out[f"{name} batch {B}"] = {
                "ms_per_frame": {k: 1000 * v / B for k, v in t.items()},
                "speedup_vs_hf": {k: t["hf generate"] / v for k, v in t.items() if k != "hf generate"},
                "over_floor": {k: v / floor for k, v in t.items()} if B == 1 else {},
                "floor_ms": 1000 * floor,
            }
        out[f"{name} plans"] = sorted({f"{k[0]}: {(p.pad_min, p.chunk, p.kernel.value)}" for k, p in chosen.items()})
    return out


def bench_tiny(repeats: int, frames: int = 60, tokens: int = 16) -> dict:
    from benchmarks.bench import tiny_pair
    from omni_core import SpeechRequest, load_pipeline

    pipe, hf = tiny_pair()
    compiled = load_pipeline("tiny", device="cpu", compile=True, max_batch=1)
    compiled.warm_up()
    text = "Tell me something about the weather today."
    ids = torch.tensor([pipe.chat_prompt(text)])
    request = SpeechRequest(text, mode="chat", predictor="kv", max_frames=frames, max_text_tokens=tokens)
    modules, chosen = [pipe.thinker, pipe.talker], {}
    in_passing_thread(torch.get_num_threads(), plan_linears, modules, chosen)
    cases = {f"eager, {v}": switching(lambda s=setter: pipe.call(s), lambda: pipe.generate(request))
             for v, setter in variants(modules, chosen)}
    cases["compiled, chosen plans"] = lambda: compiled.generate(request)
    cases["hf generate"] = lambda: hf.generate(
        input_ids=ids, speaker="ethan", thinker_max_new_tokens=tokens, thinker_do_sample=False,
        thinker_eos_token_id=pipe.config.token_ids["im_end"], talker_max_new_tokens=frames + 1,
        talker_do_sample=False)
    t = interleaved(cases, repeats)
    pipe.call(lambda: use(modules, None, chosen))
    return {"seconds": t, "speedup_vs_hf": {k: t["hf generate"] / v for k, v in t.items() if k != "hf generate"}}


def main(quick: bool = False, json_path: str = "bench_results/lone_request.json", only: str = "12") -> dict:
    reps = 3 if quick else 7
    results = {"machine": machine()}
    if "1" in only:
        results["h1_real_predictor"] = bench_real_predictor(reps)
        print_section("h1", results["h1_real_predictor"])
    if "2" in only:
        results["h2_tiny_end_to_end"] = bench_tiny(reps)
        print_section("h2", results["h2_tiny_end_to_end"])
    write_results(results, json_path)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="12", help="which parts: 1 (real predictor), 2 (tiny), 12 (both)")
    args = parser.parse_args()
    print(machine(), flush=True)  # run alone (bench.py prints it once for all its sections)
    main(args.quick, only=args.only)
