"""Command line: `python -m omni_core synth "text" ...`, `python -m omni_core score codes.npy --text ...` and
`python -m omni_core bench`."""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omni_core", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    synth = sub.add_parser("synth", help="text → WAV (and codes)")
    synth.add_argument("text")
    synth.add_argument("--model", default="tiny",
                       help="'tiny', 'tiny-tts', a checkpoint directory or a hub id (org/name)")
    synth.add_argument("--revision", default=None, help="the hub id's branch, tag or commit")
    synth.add_argument("--force", action="store_true", help="load even when the memory check says it does not fit")
    synth.add_argument("--mode", default="speak", choices=["speak", "chat"])
    synth.add_argument("--predictor", default="reprefill", choices=["reprefill", "kv", "compare"])
    synth.add_argument("--speaker", default=None)
    synth.add_argument("--language", default=None, help="Qwen3-TTS: a language the model lists (default: auto)")
    synth.add_argument("--instruct", default=None, help="Qwen3-TTS VoiceDesign (1.7B CustomVoice): how to speak")
    synth.add_argument("--device", default="auto")
    synth.add_argument("--dtype", default="auto")
    synth.add_argument("--quantize", choices=["int8", "int4", "mixed"], default=None,
                       help="int8, int4 or mixed (int4 decoder layers, int8 predictor and heads) weights for the large "
                            "matmuls (CPU)")
    synth.add_argument("--max-frames", type=int, default=None)
    synth.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--compile", action="store_true", help="torch.compile the decode steps (compiles first)")
    synth.add_argument("--out", default="out.wav", help="WAV file to write")
    synth.add_argument("--codes", default=None, help=".npy (or .json) file for the codes [T, 16]")
    synth.add_argument("--exact", action="store_true", help="the official implementation's bits (load_pipeline(exact=True))")
    score = sub.add_parser("score", help="a codes file → each code's log-probability under the model (teacher-forced)")
    score.add_argument("codes", help=".npy or .json codes file [T, 16]")
    score.add_argument("--text", required=True, help="the request's text (with --mode, --speaker, ...: the prompt)")
    for name in ("model", "revision", "mode", "predictor", "speaker", "language", "instruct", "device", "dtype"):
        action = next(a for a in synth._actions if a.dest == name)
        score.add_argument(*action.option_strings, default=action.default, choices=action.choices, help=action.help)
    score.add_argument("--top", type=int, default=5, help="alternatives per code (default: 5)")
    score.add_argument("--exact", action="store_true", help="the official implementation's bits")
    score.add_argument("--json", default=None, help="write every frame's scores to this JSON file")
    bench = sub.add_parser("bench", help="benchmark against the HF reference")
    bench.add_argument("--quick", action="store_true", help="fewer repeats and sizes (a smoke run)")
    bench.add_argument("--json", default="bench_results/bench.json")
    bench.add_argument("--only", nargs="*", default=None, help="sections to run, by letter (e.g. f g)")
    bench.add_argument("--eager", action="store_true", help="f: without the compiled engines (their first warm-up is long)")
    args = parser.parse_args(argv)
    if args.command == "bench":
        from benchmarks.bench import main as bench_main
        return bench_main(quick=args.quick, json_path=args.json, only=args.only, eager=args.eager)
    if args.command == "score":
        return _score(args)
    return _synth(args)


def _score(args) -> int:
    import json

    from omni_core import CheckpointError, RequestError, SpeechRequest, load_codes, load_pipeline

    try:
        codes = load_codes(args.codes)
        with load_pipeline(args.model, device=args.device, dtype=args.dtype, revision=args.revision,
                           exact=args.exact) as pipe:
            print(pipe.load_report, file=sys.stderr)
            score = pipe.score(codes, SpeechRequest(args.text, mode=args.mode, predictor=args.predictor,
                                                    speaker=args.speaker, language=args.language,
                                                    instruct=args.instruct), k=args.top)
    except (CheckpointError, RequestError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"codes": score.codes.tolist(), "logprobs": score.logprobs.tolist(),
                       "top_codes": score.top_codes.tolist(), "top_probs": score.top_probs.tolist()}, f)
    per_frame = score.logprobs.sum(1) if len(score.codes) else np.zeros(0)
    worst = (f"; least likely frame {int(per_frame.argmin())} ({per_frame.min():.2f})" if len(per_frame) else "")
    print(f"{len(score.codes)} frames scored: mean log-probability {score.mean_logprob:.3f} per code{worst}")
    return 0


def _synth(args) -> int:
    import soundfile as sf

    from omni_core import CheckpointError, RequestError, SpeechRequest, codes_to_json, load_pipeline

    try:
        pipe = load_pipeline(args.model, device=args.device, dtype=args.dtype, compile=args.compile,
                             revision=args.revision, force=args.force, exact=args.exact,
                             quantize=args.quantize)
        print(pipe.load_report, file=sys.stderr)
        result = pipe.generate(SpeechRequest(args.text, mode=args.mode, predictor=args.predictor,
                                             speaker=args.speaker, max_frames=args.max_frames,
                                             do_sample=args.sample, seed=args.seed, language=args.language,
                                             instruct=args.instruct))
    except (CheckpointError, RequestError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sf.write(args.out, result.audio, result.sample_rate, subtype="PCM_16")
    if args.codes:
        if args.codes.endswith(".json"):
            with open(args.codes, "w") as f:
                f.write(codes_to_json(result.codes))
        else:
            np.save(args.codes, result.codes)
    s = result.stats
    for warning in s.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(summary(s, args.out))
    return 0


def summary(s, out: str) -> str:
    """One line about a finished request; RTF and ms/frame read "n/a" when no frame was made
    (the talker can end an utterance before its first frame)."""
    rtf = "n/a" if s.rtf is None else f"{s.rtf:.3f}"
    per_frame = "n/a" if s.predictor_ms_per_frame is None else f"{s.predictor_ms_per_frame:.2f}"
    return (f"{s.frames} frames, {s.audio_s:.2f} s of audio in {s.total_s:.2f} s (RTF {rtf}); "
            f"predictor {s.predictor} {per_frame} ms/frame; stopped: {s.stopped}; wrote {out}")
