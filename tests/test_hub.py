"""Hub ids (omni_core/hub.py): a hub cache the test lays out, read with HF_HUB_OFFLINE=1; the
download path against a local server that answers as the Hub's API does (tests/fake_hub.py).

huggingface_hub reads HF_HOME / HF_ENDPOINT / HF_HUB_OFFLINE when it is imported, so every
load runs in a fresh `python` with its own environment; the server runs here and logs
what was asked of it."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_core import SpeechRequest
from omni_core.loading.hub import explain, is_hub_id, speech_shards
from omni_core.synthetic.tiny import ensure_tiny
from tests.conftest import APP_ROOT, _free_port, our_pipeline
from tests.fake_hub import COMMIT, FakeHub, Repo

TEXT, FRAMES = "Hello hub", 6

# Load each source (repo or repo@revision) and speak TEXT; print {source: codes or error}.
# huggingface_hub resumes from the last whole chunk it wrote (10 MiB); the tiny shards are
# smaller, so here the chunks are 1 MiB.
LOAD = """
import json, shutil, sys, time
from huggingface_hub import constants
from omni_core import CheckpointError, SpeechRequest, load_pipeline
constants.DOWNLOAD_CHUNK_SIZE = 2**20
if sys.argv[1] != "-":  # pretend the disk has this many bytes free
    shutil.disk_usage = lambda p: shutil._ntuple_diskusage(10**12, 10**12 - int(sys.argv[1]), int(sys.argv[1]))
out, seconds = {}, {}
for source in sys.argv[2:]:
    repo, _, revision = source.partition("@")
    started = time.perf_counter()
    try:
        with load_pipeline(repo, device="cpu", dtype="float32", revision=revision or None) as pipe:
            out[source] = pipe.generate(SpeechRequest(%r, max_frames=%d)).codes.tolist()
    except CheckpointError as e:
        out[source] = str(e)
    seconds[source] = time.perf_counter() - started
print(json.dumps(seconds))
print(json.dumps(out))
""" % (TEXT, FRAMES)


def load(home: Path, *sources: str, endpoint: str, offline: bool = False, disk_free: int | None = None,
         seconds: dict | None = None) -> dict:
    """{source: codes or error message}; `seconds`, if given, is filled with each source's load and request time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_OFFLINE"))}
    env.update(HF_HOME=str(home), HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_OFFLINE=str(int(offline)))
    args = [sys.executable, "-c", LOAD, "-" if disk_free is None else str(disk_free), *sources]
    done = subprocess.run(args, cwd=APP_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    if seconds is not None:
        seconds.update(json.loads(lines[-2]))
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def tiny_codes() -> list:
    return our_pipeline("tiny").generate(SpeechRequest(TEXT, max_frames=FRAMES)).codes.tolist()


@pytest.fixture(scope="module")
def repo() -> Repo:
    return Repo.from_dir(ensure_tiny("tiny"), **{"README.md": b"# tiny\n", "preprocessor_config.json": b"{}"})


def snapshot(home: Path, name: str = "org/tiny") -> Path:
    return home / "hub" / f"models--{name.replace('/', '--')}" / "snapshots" / COMMIT


def write_cache(home: Path, repo: Repo, name: str = "org/tiny") -> None:
    """The layout huggingface_hub writes: blobs/<etag>, snapshots/<commit>/<file> → blob, refs/main."""
    root = home / "hub" / f"models--{name.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    snapshot(home, name).mkdir(parents=True)
    for file, data in repo.files.items():
        (root / "blobs" / repo.etag(file)).write_bytes(data)
        (snapshot(home, name) / file).symlink_to(Path("../../blobs") / repo.etag(file))


def test_offline_cache_gives_the_tiny_codes(tmp_path, repo, tiny_codes):
    write_cache(tmp_path, repo)
    closed = f"http://127.0.0.1:{_free_port()}"  # nothing listens: any network use would fail
    out = load(tmp_path, "org/tiny", "org/absent", endpoint=closed, offline=True)
    assert out["org/tiny"] == tiny_codes
    assert "not in the cache" in out["org/absent"] and "HF_HUB_OFFLINE" in out["org/absent"]


def test_download_resumes_is_not_repeated_and_works_offline(tmp_path, repo, tiny_codes):
    shard = "model-00001-of-00014.safetensors"
    with FakeHub({"org/tiny": repo}) as hub:
        hub.drop_once.add(shard)
        assert load(tmp_path, "org/tiny", endpoint=hub.url)["org/tiny"] == tiny_codes
        first = hub.downloads()
        assert load(tmp_path, "org/tiny@main", endpoint=hub.url)["org/tiny@main"] == tiny_codes
        assert hub.downloads() == first, "the second load downloaded again"
        asked = len(hub.log)
        assert load(tmp_path, "org/tiny", endpoint=hub.url, offline=True)["org/tiny"] == tiny_codes
        assert len(hub.log) == asked, "HF_HUB_OFFLINE=1 still asked the server"
    got = sorted(p.name for p in snapshot(tmp_path).iterdir())
    assert got == sorted(f for f in repo.files if f not in ("README.md", "preprocessor_config.json"))
    assert all((snapshot(tmp_path) / f).read_bytes() == repo.files[f] for f in got)
    ranges = [rng for path, rng in first if path.endswith(shard)]
    assert ranges[0] is None and ranges[1].startswith("bytes=") and ranges[1] != "bytes=0-", ranges  # resumed
    fetched = sorted(path.rsplit("/", 1)[1] for path, _ in first)
    assert fetched == sorted([*got, shard])  # each file once, the cut shard twice


def test_failures_name_what_to_do(tmp_path, repo):
    llama = Repo({**repo.files, "config.json": json.dumps({"model_type": "llama"}).encode()})
    gated = (401, {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model org/gated is restricted."})
    bad_token = (401, {"X-Error-Message": "Invalid credentials in Authorization header"})
    with FakeHub({"org/tiny": repo, "org/llama": llama}, {"org/gated": gated, "org/private": bad_token}) as hub:
        out = load(tmp_path, "org/missing", "org/gated", "org/private", "org/llama", "org/tiny@v9", endpoint=hub.url)
        full = load(tmp_path / "full", "org/tiny", endpoint=hub.url, disk_free=1000)
        assert not [p for p, _ in hub.downloads() if p.endswith(".safetensors")]  # refused before any shard
    assert "org/missing was not found on the Hub (HTTP 404)" in out["org/missing"]
    assert "gated" in out["org/gated"] and "HF_TOKEN" in out["org/gated"]
    assert "refused access" in out["org/private"] and "HF_TOKEN" in out["org/private"]
    assert "neither a Qwen3-Omni nor a Qwen3-TTS repo" in out["org/llama"] and "'llama'" in out["org/llama"]
    assert "revision 'v9' does not exist" in out["org/tiny@v9"]
    total = json.loads(repo.files["model.safetensors.index.json"])["metadata"]["total_size"]
    assert f"needs {total / 1e6:.1f} MB more" in full["org/tiny"] and "only 0.0 MB is free" in full["org/tiny"]
    assert all("\n" not in message for message in [*out.values(), *full.values()])


def test_no_network(tmp_path):
    """The message comes at once: huggingface_hub alone retried for ~24 s first (hub.reachable)."""
    closed, seconds = f"http://127.0.0.1:{_free_port()}", {}
    message = load(tmp_path, "org/tiny", endpoint=closed, seconds=seconds)["org/tiny"]
    assert "cannot reach the Hub" in message and "not in the cache" in message
    assert seconds["org/tiny"] < 10, seconds


def test_no_network_a_cached_model_is_served_from_the_cache(tmp_path, repo, tiny_codes):
    """Without HF_HUB_OFFLINE, the Hub out of reach: the probe fails and the cache alone serves."""
    write_cache(tmp_path, repo)
    closed = f"http://127.0.0.1:{_free_port()}"
    assert load(tmp_path, "org/tiny", endpoint=closed)["org/tiny"] == tiny_codes



def test_disk_full_while_writing():
    message = explain(OSError(errno.ENOSPC, "No space left on device"), "org/tiny", None)
    assert message.startswith("disk full while downloading org/tiny") and "HF_HOME" in message


def test_what_counts_as_a_hub_id(tmp_path, monkeypatch):
    assert is_hub_id("Qwen/Qwen3-Omni-30B-A3B-Instruct")
    assert not is_hub_id("tiny") and not is_hub_id(str(tmp_path)) and not is_hub_id("a/b/c")
    (tmp_path / "org" / "local").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not is_hub_id("org/local")  # an existing directory wins over a hub id


def test_only_shards_with_speech_path_tensors():
    weights = {"thinker.audio_tower.conv.weight": "a.safetensors", "thinker.visual.patch.weight": "a.safetensors",
               "thinker.model.embed_tokens.weight": "b.safetensors", "code2wav.code_embedding.weight": "c.safetensors"}
    assert speech_shards(weights) == ["b.safetensors", "c.safetensors"]


def test_app_flags():
    from app.cli import parse_args
    args = parse_args(["--model", "Qwen/Qwen3-Omni-30B-A3B-Instruct", "--revision", "v1", "--force"])
    assert (args.model, args.revision, args.force) == ("Qwen/Qwen3-Omni-30B-A3B-Instruct", "v1", True)
    assert parse_args([]).revision is None and parse_args([]).force is False

