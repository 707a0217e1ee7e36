"""Reading a Qwen3-Omni checkpoint directory in the hub's layout.

config.json, sharded *.safetensors with model.safetensors.index.json (or one
model.safetensors), tokenizer files. Modules are built on the meta device, given
empty storage of the target dtype on the target device, then filled tensor by
tensor, shard by shard: peak memory is the model plus one tensor, never twice the
model. MoE experts are stored per expert (`experts.N.gate_proj.weight`, as
`save_pretrained` writes them) and copied into their slot of the stacked weights.
Every failure is a `CheckpointError` that names the file or tensor.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from omni_core.loading.quiet import quiet_transformers
from omni_core.models.config import CheckpointError, OmniConfig

TOKENIZER_FILES = ("tokenizer_config.json",)
TOKENIZER_VOCAB = (("tokenizer.json",), ("vocab.json", "merges.txt"))


def read_config(path: Path) -> OmniConfig:
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory: pass 'tiny' or a local checkpoint directory")
    file = path / "config.json"
    if not file.is_file():
        raise CheckpointError(f"{file} is missing: a Qwen3-Omni checkpoint directory has a config.json")
    try:
        raw = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{file} is not valid JSON: {e}") from None
    return OmniConfig.from_hf(raw)


def check_tokenizer_files(path: Path) -> None:
    for name in TOKENIZER_FILES:
        if not (path / name).is_file():
            raise CheckpointError(f"tokenizer file {path / name} is missing")
    if not any(all((path / n).is_file() for n in group) for group in TOKENIZER_VOCAB):
        raise CheckpointError(f"tokenizer file {path / 'tokenizer.json'} is missing "
                              "(nor are vocab.json and merges.txt there)")


def weight_map(path: Path) -> dict[str, Path]:
    """Tensor name → the shard that holds it."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index} is not a safetensors index (no weight_map): {e}") from None
        shards = {f: path / f for f in set(names.values())}
        for f, p in shards.items():
            if not p.is_file():
                raise CheckpointError(f"shard {p} named in {index.name} is missing")
        return {k: shards[f] for k, f in names.items()}
    single = path / "model.safetensors"
    if single.is_file():
        from safetensors import safe_open
        with _open(single, safe_open) as f:
            return {k: single for k in f.keys()}
    raise CheckpointError(f"no weights in {path}: expected model.safetensors.index.json or model.safetensors")


class _open:
    """safe_open with errors that name the shard."""

    def __init__(self, file: Path, opener):
        self.file, self.opener = file, opener

    def __enter__(self):
        try:
            self.handle = self.opener(str(self.file), framework="pt", device="cpu")
            return self.handle.__enter__()
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(f"shard {self.file} is corrupt or truncated: {e}") from None

    def __exit__(self, *exc):
        return self.handle.__exit__(*exc)


def materialize(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """A module built under torch.device('meta') → empty storage of `dtype` on `device`."""
    return module.to(dtype).to_empty(device=device)


def load_weights(modules: dict[str, nn.Module], path: Path) -> None:
    """Fill every parameter of `modules` ({checkpoint prefix: module}) from the shards in `path`."""
    targets = _targets(modules)
    files = weight_map(path)
    missing = sorted(k for k in targets if k not in files)
    if missing:
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        raise CheckpointError(f"tensor {missing[0]} is missing from {path}{more}: "
                              f"{', '.join(missing[:3])}")
    by_shard: dict[Path, list[str]] = {}
    for name in targets:
        by_shard.setdefault(files[name], []).append(name)
    from safetensors import safe_open
    for shard, names in sorted(by_shard.items()):
        with _open(shard, safe_open) as f:
            for name in names:
                _copy(f, shard, name, *targets[name])


def _copy(f, shard: Path, name: str, param: torch.Tensor, index) -> None:
    try:
        tensor = f.get_tensor(name)
    except Exception as e:
        raise CheckpointError(f"tensor {name} in shard {shard} cannot be read (corrupt or truncated): {e}") from None
    slot = param.data if index is None else param.data[index]
    if tuple(tensor.shape) != tuple(slot.shape):
        raise CheckpointError(f"tensor {name} in {shard.name} has shape {tuple(tensor.shape)}, "
                              f"expected {tuple(slot.shape)}: the checkpoint does not match its config.json")
    with torch.no_grad():
        slot.copy_(tensor)


def checkpoint_names(module: nn.Module) -> dict[str, tuple[torch.Tensor, object]]:
    """Checkpoint tensor name (without prefix) → (our parameter, index into it or None)."""
    return _targets({"": module})


def copy_state_dict(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Fill `module` from a state dict with checkpoint names (e.g. an HF module's `state_dict()`)."""
    targets = _targets({"": module})
    missing = sorted(set(targets) - set(state))
    if missing:
        raise CheckpointError(f"tensor {missing[0]} is missing ({len(missing)} in all)")
    for name, (param, index) in targets.items():
        slot = param.data if index is None else param.data[index]
        with torch.no_grad():
            slot.copy_(state[name])


# Fused parameters: our suffix → the checkpoint tensors stacked into it by rows, in order.
FUSED = {
    ".qkv_proj.weight": (".q_proj.weight", ".k_proj.weight", ".v_proj.weight"),
    ".gate_up_proj.weight": (".gate_proj.weight", ".up_proj.weight"),
}


def _fused(full: str, param: torch.Tensor, module: nn.Module, name: str):
    """(checkpoint name, row slice) for each part of a fused parameter."""
    for suffix, parts in FUSED.items():
        if full.endswith(suffix):
            owner = module.get_submodule(name.rsplit(".", 2)[0]) if name.count(".") >= 2 else module
            sizes = getattr(owner, "sizes", None) or [param.shape[0] // 2] * 2
            bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
            base = full[:-len(suffix)]
            return [(base + part, slice(bounds[i], bounds[i + 1])) for i, part in enumerate(parts)]
    return None


def _targets(modules: dict[str, nn.Module]) -> dict[str, tuple[torch.Tensor, object]]:
    """Checkpoint tensor name → (our parameter, index into it or None)."""
    out = {}
    for prefix, module in modules.items():
        for name, param in module.named_parameters():
            full = f"{prefix}.{name}" if prefix else name
            fused = _fused(full, param, module, name)
            if fused:
                out.update({ckpt: (param, rows) for ckpt, rows in fused})
            elif full.endswith(".experts.gate_up_proj"):
                half = param.shape[1] // 2
                for e in range(param.shape[0]):
                    out[f"{full[:-len('gate_up_proj')]}{e}.gate_proj.weight"] = (param, (e, slice(0, half)))
                    out[f"{full[:-len('gate_up_proj')]}{e}.up_proj.weight"] = (param, (e, slice(half, None)))
            elif full.endswith(".experts.down_proj"):
                for e in range(param.shape[0]):
                    out[f"{full[:-len('down_proj')]}{e}.down_proj.weight"] = (param, e)
            else:
                out[full] = (param, None)
    return out


def load_tokenizer(path: Path):
    check_tokenizer_files(path)
    from transformers import AutoTokenizer
    try:
        with quiet_transformers():  # it reads config.json through transformers' config classes
            return AutoTokenizer.from_pretrained(str(path))
    except Exception as e:
        raise CheckpointError(f"the tokenizer in {path} cannot be loaded: {e}") from None
