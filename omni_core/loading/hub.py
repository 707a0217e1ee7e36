"""Model sources: 'tiny' / 'tiny-b' / 'tiny-tts' / 'tiny-tts-base', a local checkpoint directory, or a
hub id ('org/name').

A hub id is fetched with `huggingface_hub.snapshot_download` into the standard cache
(`HF_HOME` / `HF_HUB_CACHE` respected), only the files the speech path reads: the
configs, the tokenizer and chat template, the safetensors index and the shards that
hold thinker / talker / Code2Wav tensors. Before the shards, config.json and the
index are fetched: the config must be a Qwen3-Omni one, and the index's total size
must fit on the cache's disk. A Qwen3-TTS repo (model_type qwen3_tts, a few GB at most)
is fetched whole: configs, tokenizer, weights and speech_tokenizer/ (its codec). `HF_HUB_OFFLINE=1` reads the cache and never the network.

Resuming: a dropped connection resumes within the file (an HTTP Range request,
huggingface_hub's retries); files that finished stay in the cache, so a stopped
download continues from the first unfinished file.

Unreachable Hub: before asking, one TCP connection to the endpoint's host is tried (`reachable`,
skipped behind a proxy). If it fails, the files come from the cache alone: huggingface_hub would
retry five times over ~24 s (measured) before saying a model it does not have cached is out of reach.

Every failure is one `CheckpointError` line that says what to do.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import shutil
import socket
import urllib.parse
import urllib.request
from pathlib import Path

from omni_core.families import registry
from omni_core.synthetic import tiny
from omni_core.synthetic import qwen3_tts as synthetic_tts
from omni_core.models.config import CheckpointError
from omni_core.loading.memory import size

log = logging.getLogger(__name__)

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
INDEX = "model.safetensors.index.json"
# Everything but the weights: configs, tokenizer, chat template (the weights are chosen from the index).
SPEECH_FILES = ["config.json", "generation_config.json", "tokenizer*", "vocab.json", "merges.txt",
                "added_tokens.json", "special_tokens_map.json", "chat_template.json", "chat_template.jinja", INDEX]
SKIPPED_PREFIXES = ("thinker.audio_tower.", "thinker.visual.")  # never loaded (see checkpoint.py)
REACH_S = 5.0  # seconds the endpoint's host has to accept a connection (`reachable`)


def is_hub_id(source: str) -> bool:
    return bool(HUB_ID.match(source)) and not Path(source).expanduser().exists()


def resolve_source(source: str | Path, revision: str | None = None) -> Path:
    """The local directory that holds `source`: the tiny model (made on first use), the directory
    itself, or the hub snapshot (downloaded when not cached)."""
    name = str(source)
    if name in tiny.PRESETS:
        return tiny.ensure_tiny(name)
    if name in synthetic_tts.TINY_PRESETS:
        return synthetic_tts.ensure_tiny_tts(name)
    if not is_hub_id(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise CheckpointError(f"{name!r} is not a directory: pass 'tiny', a local checkpoint directory, "
                                  "or a hub id such as Qwen/Qwen3-Omni-30B-A3B-Instruct")
        return path
    try:
        return download(name, revision)
    except CheckpointError:
        raise
    except Exception as e:  # huggingface_hub's and the network's errors → one line naming what to do
        raise CheckpointError(explain(e, name, revision)) from None


def reachable(endpoint: str, timeout: float = REACH_S) -> bool:
    """Whether the endpoint's host accepts a TCP connection within `timeout` s: a closed port, an unknown
    host or no route fail at once. Behind a proxy (HTTP(S)_PROXY) the host is not asked: True."""
    url = urllib.parse.urlsplit(endpoint)
    if urllib.request.getproxies().get(url.scheme) or not url.hostname:
        return True
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def download(repo_id: str, revision: str | None = None) -> Path:
    """Fetch the speech path's files of `repo_id` into the hub cache; return the snapshot folder.
    With the Hub out of reach (`reachable`), the cache's files, without waiting for retries."""
    from functools import partial

    from huggingface_hub import constants, hf_hub_download, snapshot_download

    if not constants.is_offline_mode() and not reachable(constants.ENDPOINT):
        log.warning("cannot reach %s: using the cache only", constants.ENDPOINT)
        hf_hub_download = partial(hf_hub_download, local_files_only=True)
        snapshot_download = partial(snapshot_download, local_files_only=True)
    config = json.loads(Path(hf_hub_download(repo_id, "config.json", revision=revision)).read_text())
    family = registry.of_model_type(config.get("model_type"))
    if family is None:
        raise CheckpointError(f"{repo_id} is neither a Qwen3-Omni nor a Qwen3-TTS repo: its config.json has "
                              f"model_type {config.get('model_type')!r}; pick e.g. Qwen/Qwen3-Omni-30B-A3B-Instruct "
                              "or Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    whole = family.loading.HUB_FILES  # a small repo: these files whole (None: the speech path's shards)
    if whole is not None:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=SPEECH_FILES + whole))
    index_file = Path(hf_hub_download(repo_id, INDEX, revision=revision))
    index = json.loads(index_file.read_text())
    if not isinstance(index.get("weight_map"), dict):
        raise CheckpointError(f"{repo_id}'s {INDEX} has no weight_map: not a safetensors checkpoint index")
    shards = speech_shards(index["weight_map"])
    check_disk(index_file.parent, shards, int(index.get("metadata", {}).get("total_size", 0)))
    folder = snapshot_download(repo_id, revision=revision, allow_patterns=SPEECH_FILES + shards)
    return Path(folder)


def speech_shards(weight_map: dict[str, str]) -> list[str]:
    """The shards that hold at least one tensor the speech path loads."""
    return sorted({shard for name, shard in weight_map.items() if not name.startswith(SKIPPED_PREFIXES)})


def check_disk(snapshot: Path, shards: list[str], total_size: int) -> None:
    """Refuse before downloading when the shards still missing cannot fit on the cache's disk."""
    have = sum((snapshot / s).stat().st_size for s in shards if (snapshot / s).is_file())
    need = max(0, total_size - have)
    free = disk_free(snapshot)
    if need > free:
        raise CheckpointError(f"not enough disk space: the checkpoint needs {size(need)} more in {cache_root()} "
                              f"but only {size(free)} is free; free some space or set HF_HOME to a bigger disk")


def disk_free(path: Path) -> int:
    for p in (path, *path.parents):  # the first folder that exists
        if p.exists():
            return shutil.disk_usage(p).free
    return shutil.disk_usage("/").free


def cache_root() -> str:
    from huggingface_hub import constants
    return constants.HF_HUB_CACHE


def explain(e: Exception, repo_id: str, revision: str | None) -> str:
    """huggingface_hub's error → one line that says what to do."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RemoteEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    status = getattr(getattr(e, "response", None), "status_code", None)
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return (f"disk full while downloading {repo_id} into {cache_root()}: free some space "
                "or set HF_HOME to a bigger disk, then run again (finished files are kept)")
    if isinstance(e, GatedRepoError):
        return (f"{repo_id} is gated: accept its terms on the model's Hub page, then log in "
                "(`hf auth login`) or set HF_TOKEN to a token of that account")
    if isinstance(e, RepositoryNotFoundError):
        return (f"{repo_id} was not found on the Hub (HTTP {status}): check the id (org/name); "
                "a private repo needs `hf auth login` or HF_TOKEN")
    if status in (401, 403):
        return (f"the Hub refused access to {repo_id} (HTTP {status}): log in (`hf auth login`) "
                "or set HF_TOKEN to a valid token with access to it")
    if isinstance(e, RevisionNotFoundError):
        return f"revision {revision!r} does not exist in {repo_id}: check --revision (a branch, tag or commit)"
    if isinstance(e, RemoteEntryNotFoundError):
        return (f"{repo_id} has no {_entry(e)}: not a safetensors Qwen3-Omni checkpoint; "
                "pick a Qwen3-Omni repo such as Qwen/Qwen3-Omni-30B-A3B-Instruct")
    if isinstance(e, LocalEntryNotFoundError):
        if constants.is_offline_mode():
            return (f"{repo_id} is not in the cache ({cache_root()}) and HF_HUB_OFFLINE is set: "
                    "download it once with network access, or unset HF_HUB_OFFLINE")
        return (f"cannot reach the Hub ({constants.ENDPOINT}) and {repo_id} is not in the cache "
                f"({cache_root()}): check the network (or HF_ENDPOINT), or pass a local checkpoint directory")
    if isinstance(e, HfHubHTTPError):
        return f"the Hub answered HTTP {status} for {repo_id}: try again later ({_first_line(e)})"
    return f"cannot download {repo_id}: {type(e).__name__}: {_first_line(e)}"


def _entry(e: Exception) -> str:
    url = str(getattr(getattr(e, "response", None), "url", "") or "")
    return url.rsplit("/", 1)[-1] or "such file"


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0]
