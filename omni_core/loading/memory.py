"""The memory check before loading, and the report after.

The bytes the speech path needs come from the checkpoint itself: every shard's
safetensors header lists its tensors' shapes, so the parameters of each part
(thinker text model, talker with its code predictor, Code2Wav) are counted without
reading a weight, then priced at the target dtype. The audio and vision towers are in
the checkpoint but never loaded, so they are not counted. The device's free memory
(CUDA: `mem_get_info`; CPU: MemAvailable) must hold the weights plus a headroom for
the running requests' caches and activations, or loading stops before it starts.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from omni_core.loading.checkpoint import weight_map
from omni_core.models.config import CheckpointError

log = logging.getLogger(__name__)

PARTS = {"thinker": "thinker.", "talker": "talker.", "code2wav": "code2wav."}  # part → checkpoint prefix
SKIPPED = ("thinker.audio_tower.", "thinker.visual.")  # in the checkpoint, never loaded
HEADROOM = 0.05  # of the weights: KV caches, activations and the CUDA context of the running requests
MIN_HEADROOM = 256 * 2**20


@dataclass(frozen=True)
class Part:
    name: str
    params: int
    bytes: int


@dataclass(frozen=True)
class MemoryPlan:
    parts: tuple[Part, ...]
    dtype: torch.dtype

    @property
    def params(self) -> int:
        return sum(p.params for p in self.parts)

    @property
    def weight_bytes(self) -> int:
        return sum(p.bytes for p in self.parts)

    @property
    def need(self) -> int:
        """Weights plus headroom: what the device must have free."""
        return self.weight_bytes + max(int(HEADROOM * self.weight_bytes), MIN_HEADROOM)

    def describe(self) -> str:
        parts = " · ".join(f"{p.name} {count(p.params)} params {size(p.bytes)}" for p in self.parts)
        return f"{parts} · total {count(self.params)} params {size(self.weight_bytes)}"


def plan(path: Path, dtype: torch.dtype, parts: dict[str, tuple[Path, str]] | None = None) -> MemoryPlan:
    """Parameters and bytes per part of the speech path, from the shards' headers. `parts`: name →
    (checkpoint folder, tensor prefix); by default Qwen3-Omni's parts in `path`."""
    parts = parts or {name: (path, prefix) for name, prefix in PARTS.items()}
    shapes: dict[Path, dict[str, list[int]]] = {}
    itemsize = torch.empty((), dtype=dtype).element_size()
    out = []
    for name, (folder, prefix) in parts.items():
        if folder not in shapes:
            shapes[folder] = {}
            for shard in sorted(set(weight_map(folder).values())):
                shapes[folder].update(read_header(shard))
        params = sum(math.prod(shape) for t, shape in shapes[folder].items()
                     if t.startswith(prefix) and not t.startswith(SKIPPED))
        out.append(Part(name, params, params * itemsize))
    return MemoryPlan(tuple(out), dtype)


def read_header(shard: Path) -> dict[str, list[int]]:
    """Tensor name → shape, from a safetensors header (8-byte little-endian length, then JSON)."""
    try:
        with open(shard, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if not 0 < n < 2**30:
                raise ValueError(f"header length {n}")
            header = json.loads(f.read(n))
        return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"shard {shard} is corrupt or truncated: its header cannot be read ({e})") from None


def free_bytes(device: torch.device) -> int | None:
    """What the device has free now: CUDA's free memory, or the RAM Linux says is available."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def fits(plan: MemoryPlan, device: torch.device) -> bool:
    """Whether the speech path fits in what `device` has free now (True where that cannot be measured)."""
    free = free_bytes(device)
    return free is None or plan.need <= free


def check(plan: MemoryPlan, device: torch.device, force: bool = False) -> int | None:
    """Raise CheckpointError when the speech path cannot fit in what `device` has free (unless force).
    Returns the free bytes (None where they cannot be measured: then nothing is checked)."""
    free = free_bytes(device)
    if free is None or plan.need <= free:
        return free
    message = (f"the speech path needs {size(plan.need)} on {device} ({size(plan.weight_bytes)} of "
               f"{str(plan.dtype).replace('torch.', '')} weights plus headroom) but only {size(free)} is free: "
               "use another device (--device), a machine with more memory, or --force to try anyway")
    if not force:
        raise CheckpointError(message)
    log.warning("--force: %s", message)
    return free


def report(source: str, plan: MemoryPlan, device: torch.device, free: int | None, seconds: float) -> str:
    """The start-up line: what was loaded, where, how big, how long."""
    room = f", {size(free)} was free" if free is not None else ""
    return (f"loaded {source} on {device} as {str(plan.dtype).replace('torch.', '')} in {seconds:.1f} s: "
            f"{plan.describe()}{room}")


def count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
