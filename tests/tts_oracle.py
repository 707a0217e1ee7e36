"""The Qwen3-TTS oracle for the parity tests: the official package in .venv-ref, as a subprocess.

`checkpoint(kind)` builds the oracle's random checkpoints once (custom_voice, voice_design,
base) into the synthetic cache, `oracle(...)` runs a subcommand of
tests/reference/qwen_tts_oracle.py (in one oracle server per test process,
tests/reference/oracle_server.py) and caches its .npz output beside them, keyed by the
oracle script, the checkpoint and the inputs, so a second test run does not run the
package again. `oracle` also takes a checkpoint folder of ours (a tiny preset), which the
package reads through `package_view`. `our_tts(kind)` loads our pipeline on the same
checkpoint (in exact mode). Tests that need the oracle skip, saying why, when .venv-ref is missing
(scripts/setup_ref.sh makes it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from omni_core.cache import cache_dir

ROOT = Path(__file__).resolve().parent.parent
REF_PYTHON = ROOT / ".venv-ref" / "bin" / "python"
SCRIPT = ROOT / "tests" / "reference" / "qwen_tts_oracle.py"
SCORES = ROOT / "tests" / "reference" / "qwen_tts_scores.py"  # greedy takes with each frame's raw logits
KINDS = ("custom_voice", "voice_design", "base")


def require_oracle() -> None:
    if not REF_PYTHON.exists():
        pytest.skip("the Qwen3-TTS oracle needs .venv-ref with the official qwen-tts package: "
                    "run scripts/setup_ref.sh")


def _version() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:12]


def oracle_root() -> Path:
    return cache_dir() / f"qwen3-tts-oracle-{_version()}"


@functools.lru_cache(maxsize=None)
def checkpoint(kind: str) -> Path:
    """The oracle's checkpoint folder of `kind` (built on first use, all kinds at once)."""
    require_oracle()
    root = oracle_root()
    if not all((root / k / "config.json").exists() for k in KINDS):
        _call(["build", str(root)])
    return root / kind


def oracle(command: str, kind: str | Path, payload, dtype: str = "float32", script: Path = SCRIPT) -> dict[str, np.ndarray]:
    """Run `command` (run | encode | decode | xvector) on checkpoint `kind` (one of KINDS, or a folder
    of ours) with `payload` (the request list for run, a dict of arrays otherwise); the outputs as
    arrays. Cached on disk by content. script: SCORES for `run` with the raw logits of every frame."""
    folder = package_view(kind) if isinstance(kind, Path) else checkpoint(kind)
    tag = folder.name  # the kind, or our folder's name and content hash
    blob = json.dumps(payload, sort_keys=True, default=_jsonable).encode()
    mark = b"" if script == SCRIPT else script.read_bytes()  # another script: its own runs
    key = hashlib.sha256(blob + command.encode() + tag.encode() + dtype.encode() + mark).hexdigest()[:20]
    out = oracle_root() / "runs" / f"{command}-{key}.npz"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        # Names of this process's own (two test workers may ask for the same run at once; same bytes).
        tmp = out.with_name(f"{out.stem}.{os.getpid()}" + (".in.json" if command == "run" else ".in.npz"))
        if command == "run":
            tmp.write_text(json.dumps(payload, default=_jsonable))
        else:
            np.savez(tmp, **payload)
        partial = out.with_name(f"{out.stem}.{os.getpid()}.partial.npz")
        args = [command, str(folder), str(tmp), str(partial)] + (["--dtype", dtype] if command in ("run", "encode") else [])
        _call(args, script)
        os.replace(partial, out)
        tmp.unlink()
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def package_view(folder: Path) -> Path:
    """Our checkpoint `folder` as the package can read it: links to its files, and its
    tokenizer_config.json in transformers 4's words (transformers 5 writes `extra_special_tokens`
    as a list and the class `TokenizersBackend`, which the package's 4.57 refuses). tokenizer.json,
    which holds every id, is the same file. Named by the folder's content, made once."""
    require_oracle()
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "speech_tokenizer/model.safetensors"):
        digest.update((folder / name).read_bytes())
    view = oracle_root() / "ours" / f"{folder.name}-{digest.hexdigest()[:12]}"
    if view.exists():
        return view
    partial = view.with_name(f"{view.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["additional_special_tokens"] = config.pop("extra_special_tokens", [])
    config.pop("backend", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (partial / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    for item in folder.iterdir():
        if item.name != "tokenizer_config.json":
            (partial / item.name).symlink_to(item.resolve())
    try:
        partial.rename(view)
    except OSError:  # another test worker made the same view first
        if not view.exists():
            raise
        shutil.rmtree(partial, ignore_errors=True)
    return view


def _jsonable(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


SERVER = ROOT / "tests" / "reference" / "oracle_server.py"
_server: subprocess.Popen | None = None
_server_log = None  # the server's stderr (the package's prints), read back when a command fails
_server_lock = threading.Lock()


def _call(args: list[str], script: Path = SCRIPT) -> None:
    """Run the oracle `script` with `args` in this process's oracle server (started on first use: Python with
    torch and qwen_tts takes some 6 s to start, longer than most commands); it ends when this process does."""
    global _server, _server_log
    with _server_lock:
        if _server is None or _server.poll() is not None:
            _server_log = tempfile.TemporaryFile(mode="w+")
            _server = subprocess.Popen([str(REF_PYTHON), str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=_server_log, text=True, cwd=ROOT)
        _server.stdin.write(json.dumps([script.name, args]) + "\n")
        _server.stdin.flush()
        line = _server.stdout.readline()
        if not line:  # the server died: say what it printed
            _server_log.seek(0)
            raise RuntimeError(f"the oracle server exited ({' '.join(args[:2])}):\n{_server_log.read()[-3000:]}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"the oracle failed ({' '.join(args[:2])}):\n{reply['error'][-3000:]}")


@functools.lru_cache(maxsize=None)
def our_tts(kind: str, dtype: str = "float32", exact: bool = True):
    """Our pipeline on the oracle's checkpoint: in exact mode (the official bits, the parity tests') unless
    exact=False (the default, batch-invariant mode: the engine tests)."""
    from omni_core import load_pipeline

    return load_pipeline(checkpoint(kind), device="cpu", dtype=dtype, exact=exact)


def tone(seconds: float = 1.3, rate: int = 24000, seed: int = 0) -> np.ndarray:
    """A synthetic clip: a modulated tone, a high partial and a little noise (float32)."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.size)
    x = 0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) + 0.1 * np.sin(2 * np.pi * 1300 * t)
    return (x + 0.02 * noise).astype(np.float32)
