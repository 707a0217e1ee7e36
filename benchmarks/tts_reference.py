"""The official Qwen3-TTS package (`qwen-tts` 0.1.1) as a timing server for benchmarks/tts.py.

Runs in .venv-ref (scripts/setup_ref.sh: the package pins transformers 4.57.3) as a long-lived
subprocess, and never imports omni_core. It loads one checkpoint and times its own greedy
`generate_custom_voice` calls when asked, so the benchmark can interleave ours and theirs per
repeat while each side loads its weights once. JSON lines, one request and one reply each:

    {"op": "load", "model": DIR, "dtype": "float32", "threads": 2}
        -> {"ok": true, "load_s": ...}
    {"op": "speak", "text": ..., "speaker": ..., "language": ..., "max_frames": N, "codes": false}
        -> {"ok": true, "seconds": ..., "generate_s": ..., "predictor_s": ..., "decode_s": ..., "frames": ...,
            "codes": [[16 ints] per frame] (when asked)}
    {"op": "quit"}
    a failure -> {"ok": false, "error": "..."}

`seconds` is the whole wrapper call (prompt, the model's generate, the codec's decode);
`generate_s` the model's generate (talker and predictor), `predictor_s` the part of it in the code
predictor's generate, `decode_s` the codec's decode. Our `max_frames=N` is the package's
`max_new_tokens=N+1` (docs/QWEN3_TTS.md). The package prints to stdout (a flash-attn notice at
import), so the replies go to the original stdout and everything else to stderr.

    .venv-ref/bin/python benchmarks/tts_reference.py < requests.jsonl
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

OPS = ("load", "speak")


def package_view(folder: Path, into: Path) -> Path:
    """`folder` as the package reads it (as tests/tts_oracle.py does): links to its files and its
    tokenizer_config.json in transformers 4's words (transformers 5 writes `extra_special_tokens` as
    a list and the class `TokenizersBackend`, which 4.57 refuses). tokenizer.json is the same file."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["additional_special_tokens"] = config.pop("extra_special_tokens", [])
    config.pop("backend", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    into.mkdir(parents=True)
    (into / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    for item in folder.iterdir():
        if item.name != "tokenizer_config.json":
            (into / item.name).symlink_to(item.resolve())
    return into


class Timed:
    """Wraps obj.method: `seconds` adds up the time spent in it, `last` is what it last returned."""

    def __init__(self, obj, method: str):
        self.seconds, self.last, original = 0.0, None, getattr(obj, method)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                self.last = original(*args, **kwargs)
                return self.last
            finally:
                self.seconds += time.perf_counter() - t

        setattr(obj, method, timed)


class Server:
    def __init__(self):
        self.tts, self.scratch = None, Path(tempfile.mkdtemp(prefix="qwen-tts-view-"))

    def load(self, model: str, dtype: str, threads: int | None = None) -> dict:
        from qwen_tts import Qwen3TTSModel

        if threads:
            torch.set_num_threads(int(threads))
        self.tts = None  # let the previous model go before the next one loads
        view = package_view(Path(model), self.scratch / f"view-{len(list(self.scratch.iterdir()))}")
        t = time.perf_counter()
        self.tts = Qwen3TTSModel.from_pretrained(str(view), dtype=getattr(torch, dtype))
        self.generate = Timed(self.tts.model, "generate")
        self.predictor = Timed(self.tts.model.talker.code_predictor, "generate")
        self.decode = Timed(self.tts.model.speech_tokenizer, "decode")
        return {"load_s": time.perf_counter() - t}

    def speak(self, text: str, speaker: str, language: str, max_frames: int, codes: bool = False) -> dict:
        for timer in (self.generate, self.predictor, self.decode):
            timer.seconds = 0.0
        t = time.perf_counter()
        self.tts.generate_custom_voice(text=text, speaker=speaker, language=language, non_streaming_mode=True,
                                       do_sample=False, subtalker_dosample=False, max_new_tokens=max_frames + 1)
        seconds = time.perf_counter() - t
        frame_codes = self.generate.last[0][0]  # (codes per request, hidden states): request 0's [T, 16]
        out = {"seconds": seconds, "generate_s": self.generate.seconds, "predictor_s": self.predictor.seconds,
               "decode_s": self.decode.seconds, "frames": int(frame_codes.shape[0])}
        if codes:
            out["codes"] = frame_codes.tolist()
        return out

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def main() -> int:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the package's prints go to stderr
    torch.set_grad_enabled(False)
    server = Server()
    try:
        for line in sys.stdin:
            request = json.loads(line)
            op = request.pop("op")
            if op == "quit":
                break
            try:
                if op not in OPS:
                    raise ValueError(f"unknown op {op!r}: use {', '.join(OPS)} or quit")
                reply = {"ok": True, **getattr(server, op)(**request)}
            except Exception:
                reply = {"ok": False, "error": traceback.format_exc()[-3000:]}
            replies.write(json.dumps(reply) + "\n")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
