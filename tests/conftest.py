"""Shared fixtures. Engine tests: the HF reference (the oracle) and our pipeline on
the same tiny checkpoint, for two differently shaped presets. App tests: a real
`python app.py` server (`app_server`, `launch_app`)."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import time
import urllib.request
import warnings

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
warnings.filterwarnings("ignore", message=".*rope_parameters.*")

# Tiny models on a 2-core machine: one intra-op thread is faster, and does not
# collapse when the other core is busy (OpenMP barriers spin).
import torch  # noqa: E402

torch.set_num_threads(1)

PRESETS = ("tiny", "tiny-b")

# Files that take minutes cold (compiling frames, building real-width checkpoints), handed to the two
# workers first (scripts/test.sh runs pytest-xdist with --no-loadscope-reorder, which keeps this order):
# otherwise xdist orders files by their number of tests, and a one-test file that compiles for minutes
# started last, alone on one core.
# test_compiled.py and test_compiled_batches.py first, one on each worker: they compile the tiny model's
# frames and steps between them (test_compiled.warm_up_backwards).
SLOW_FIRST = ("test_compiled.py", "test_compiled_batches.py", "test_compiled_shapes.py", "test_real_width.py",
              "test_tts_real_width.py", "test_app_api_inspect.py")
# Files that go last: test_random_weights.py's default-mode load needs the plans of the real-width shapes that
# test_real_width.py's process probes (minutes of bfloat16 GEMMs on an AVX2-only CPU). Run beside it, its worker
# waited on the plans' lock for 2.5 minutes of a cold Zen 3 run (one core idle); after it, it reads them.
LAST = ("test_random_weights.py",)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate((*SLOW_FIRST, None, *LAST))}  # None: the place of every other file
    rest = rank[None]
    items.sort(key=lambda item: rank.get(item.path.name, rest))  # stable: the rest keep their order


@pytest.fixture(autouse=True, scope="module")
def _release_memory_after_each_file():
    """After each test file: its dropped models' memory goes back to the system. glibc keeps what a process
    freed for its next allocations, so a worker that once held a real-width model (GBs) held them to its end
    and the two workers beside a real-width build ran the machine out of memory (a worker OOM-killed in CI)."""
    yield
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@functools.lru_cache(maxsize=None)
def hf_reference(preset: str):
    """HF Qwen3OmniMoeForConditionalGeneration loaded from the saved tiny checkpoint (float32, eval)."""
    import torch
    from transformers import Qwen3OmniMoeForConditionalGeneration

    from omni_core.synthetic.tiny import ensure_tiny

    torch.manual_seed(0)
    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(ensure_tiny(preset), dtype=torch.float32).eval()


@functools.lru_cache(maxsize=None)
def our_pipeline(preset: str, dtype: str = "float32", **options):
    """One pipeline per (preset, dtype, engine options) per process; options: load_pipeline's."""
    from omni_core import load_pipeline

    return load_pipeline(preset, device="cpu", dtype=dtype, **options)


@pytest.fixture(params=PRESETS)
def preset(request) -> str:
    return request.param


@pytest.fixture
def hf(preset):
    return hf_reference(preset)


@pytest.fixture
def pipe(preset):
    """The parity tests' pipeline: exact mode, the official implementation's bits (one request at a time)."""
    return our_pipeline(preset, exact=True)


# ---- app tests: real `python app.py` servers ----------------------------------------------

APP_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP_START_TIMEOUT_S = 240


@contextlib.contextmanager
def launch_app(log_dir, args: tuple = (), **env_overrides):
    """Run `python app.py --port <free port> *args` on the tiny model; yield its URL, stop it on exit."""
    port = _free_port()
    log_path = log_dir / "server.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", **env_overrides}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *args], cwd=APP_ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_until_up(proc, url, log_path)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def app_server(tmp_path_factory) -> str:
    """One app server for every app test in the session."""
    with launch_app(tmp_path_factory.mktemp("app")) as url:
        yield url


@pytest.fixture(scope="session")
def tts_server(tmp_path_factory) -> str:
    """One app server on tiny-tts (a Qwen3-TTS CustomVoice model with a codec encoder), set as a Space
    sets it: OMNI_MODEL."""
    with launch_app(tmp_path_factory.mktemp("tts"), OMNI_MODEL="tiny-tts") as url:
        yield url


@pytest.fixture(scope="session")
def tts_base_server(tmp_path_factory) -> str:
    """One app server on tiny-tts-base (a Qwen3-TTS Base model: it clones a voice from a clip)."""
    with launch_app(tmp_path_factory.mktemp("tts-base"), OMNI_MODEL="tiny-tts-base") as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(proc: subprocess.Popen, url: str, log_path) -> None:
    deadline = time.monotonic() + APP_START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"app.py did not answer within {APP_START_TIMEOUT_S} s:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.5)
