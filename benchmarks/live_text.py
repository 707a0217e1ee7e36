"""(y) Text still being written (issue 62): first audio after the first piece, against the same text given whole.

For each model (tiny-tts, and Qwen3-TTS 0.6B at real widths with random weights, bfloat16), one process, the
rounds interleaved (whole, fast, slow in turn), medians of `--rounds`; one warm-up round first. A greedy KV
request, streaming text input, FRAMES frames:

  whole   `pipe.stream` with all the text: first audio (submission to the first AudioChunk) and the steady
          frame time (the frames after the first, per frame)
  fast    `pipe.stream_text` with the first three words, the rest sent word by word at once (a client writing
          faster than the model speaks): first audio from the call, frame time, the talker's wait for text
  slow    the first three words, then a word every SLOW_S (a client slower than the model): first audio,
          the wait for text (Stats.text_wait_s)

The goal: fast's and slow's first audio at most whole's + one frame; fast's frames with no wait for text.

    .venv/bin/python -m benchmarks.live_text [--models tiny-tts random:qwen3-tts-0.6b] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

TEXT = "Hello there, this is a reply that a language model is still writing, word by word, as you listen."
FRAMES = 24
SLOW_S = 0.3  # seconds between the slow client's words


def take(pipe, how: str) -> dict:
    """One request (`how`: whole, fast or slow) → first audio (ms), steady ms a frame, wait for text (ms)."""
    from omni_core import AudioChunk, Done, Frame, SpeechRequest

    req = SpeechRequest(TEXT, predictor="kv", text_input="streaming", max_frames=FRAMES)
    words = TEXT.split(" ")
    t0 = time.perf_counter()
    if how == "whole":
        stream = pipe.stream(req)
    else:
        stream = pipe.stream_text(SpeechRequest(" ".join(words[:3]) + " ", predictor="kv", max_frames=FRAMES))
        threading.Thread(target=send, args=(stream, words[3:], 0.0 if how == "fast" else SLOW_S), daemon=True).start()
    first = None
    frames = []
    for event in stream:
        now = time.perf_counter()
        if isinstance(event, AudioChunk) and first is None:
            first = now - t0
        elif isinstance(event, Frame):
            frames.append(now)
        elif isinstance(event, Done):
            stats = event.result.stats
    steady = (frames[-1] - frames[0]) / (len(frames) - 1)
    return dict(first_audio_ms=1000 * first, frame_ms=1000 * steady, text_wait_ms=1000 * stats.text_wait_s)


def send(stream, words: list[str], pause_s: float) -> None:
    for i, word in enumerate(words):
        time.sleep(pause_s)
        stream.append(word + (" " if i < len(words) - 1 else ""))
    stream.end()


def run(model: str, rounds: int) -> dict:
    from omni_core import load_pipeline

    pipe = load_pipeline(model, device="cpu", dtype="bfloat16" if model.startswith("random:") else "auto")
    kinds = ("whole", "fast", "slow")
    for how in kinds:  # warm-up
        take(pipe, how)
    figures = {how: [] for how in kinds}
    for _ in range(rounds):
        for how in kinds:
            figures[how].append(take(pipe, how))
    pipe.close()
    return {how: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for how, runs in figures.items()}


def main() -> None:
    from benchmarks.bench import machine

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny-tts", "random:qwen3-tts-0.6b"])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(machine())
    for model in args.models:
        out = run(model, args.rounds)
        frame = out["whole"]["frame_ms"]
        print(f"\n{model} ({args.rounds} rounds, medians; ms)")
        print(f"{'way':6} {'first audio':>12} {'frame':>8} {'text wait':>10} {'first - whole':>14} {'goal (1 frame)':>15}")
        for how, f in out.items():
            extra = f["first_audio_ms"] - out["whole"]["first_audio_ms"]
            print(f"{how:6} {f['first_audio_ms']:12.1f} {f['frame_ms']:8.1f} {f['text_wait_ms']:10.1f} {extra:14.1f} "
                  f"{'met' if extra <= frame else 'not met':>15}")


if __name__ == "__main__":
    main()
