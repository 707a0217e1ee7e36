"""CodecState and SlidingKVCache (omni_core/codec/state.py): what a streaming Code2Wav carries
between chunks (convolution tails, the last window-1 keys and values, the position), and the
one-way imports of the codec package (state ← code2wav ← streaming)."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from torch import nn

from omni_core.codec.state import CodecState, SlidingKVCache

CODEC_DIR = Path(__file__).resolve().parent.parent / "omni_core" / "codec"


def kv(T: int, start: int = 0) -> torch.Tensor:
    """[1, 2, T, 3] whose position p holds the value start + p."""
    return (torch.arange(start, start + T, dtype=torch.float32)[None, None, :, None]).expand(1, 2, T, 3).clone()


def test_sliding_cache_returns_past_and_new_and_keeps_window_minus_one():
    cache = SlidingKVCache(window=4)
    assert cache.length == 0
    k, v = cache.update(0, kv(2), kv(2) + 100)
    assert k.shape[2] == 2 and cache.length == 2  # fewer than window-1: all kept
    k, v = cache.update(0, kv(3, start=2), kv(3, start=2) + 100)
    assert k[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4]  # past + new
    assert v[0, 0, :, 0].tolist() == [100, 101, 102, 103, 104]
    assert cache.length == 3 and cache.k[0][0, 0, :, 0].tolist() == [2, 3, 4]  # the last window-1
    cache.update(1, kv(1), kv(1))
    assert set(cache.k) == {0, 1} and cache.k[1].shape[2] == 1  # each layer its own


def test_the_cache_keeps_copies():
    cache = SlidingKVCache(window=3)
    k = kv(2)
    cache.update(0, k, k.clone())
    k.zero_()
    assert cache.k[0][0, 0, :, 0].tolist() == [0, 1]


def test_prepend_pads_the_first_chunk_then_carries_the_tail():
    state, conv = CodecState(window=4), nn.Identity()
    x = torch.arange(1, 4, dtype=torch.float32).reshape(1, 1, 3)  # [B, C, T]
    first = state.prepend(conv, x, keep=2, zeros_first=True)
    assert first[0, 0].tolist() == [0, 0, 1, 2, 3]  # zeros: a causal conv's left padding
    second = state.prepend(conv, x + 10, keep=2, zeros_first=True)
    assert second[0, 0].tolist() == [2, 3, 11, 12, 13]  # the last 2 columns of the chunk before
    other = nn.Identity()  # a second module has its own tail; without zeros_first nothing comes first
    assert state.prepend(other, x, keep=1, zeros_first=False)[0, 0].tolist() == [1, 2, 3]
    assert state.prepend(other, x, keep=1, zeros_first=False)[0, 0].tolist() == [3, 1, 2, 3]
    assert state.prepend(conv, x, keep=0, zeros_first=True) is x  # nothing to carry


def test_position_counts_frames():
    state = CodecState(window=72)
    state.advance(3)
    state.advance(1)
    assert state.position == 4 and state.kv.keep == 71


def local_imports(name: str) -> set[str]:
    """The omni_core modules a codec module imports."""
    tree = ast.parse((CODEC_DIR / f"{name}.py").read_text())
    return {node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("omni_core")}


def test_codec_modules_import_one_way():
    """state ← code2wav ← streaming: no module imports one that imports it back."""
    assert local_imports("state") == set()
    assert "omni_core.codec.streaming" not in local_imports("code2wav")
    assert "omni_core.codec.state" in local_imports("code2wav")
    assert {"omni_core.codec.code2wav", "omni_core.codec.state"} <= local_imports("streaming")
