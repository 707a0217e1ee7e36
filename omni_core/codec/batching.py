"""Whether a codec decodes a batch of streams batched (one oneDNN call per convolution, backend.py) on this machine.

Batched, a stream's audio must still be its own decode's, bit for bit, whatever streams share its calls. oneDNN's
forward convolution computed every row of a batch as alone on the CPUs measured (BENCHMARKS.md, "Code2Wav (the
codec)"), but that is its kernels' choice, not a promise, so `decide` checks it at load on this codec, as the
planner checks each matmul's plan: random streams decoded chunk by chunk alone and together, at every chunk
length the engine sends. Where a row differs, or oneDNN cannot take the codec (another device or dtype), the
codec stays row by row. The answer depends on the codec's shapes, its dtype and the machine's kernels (and their
threads), never on the weights' values, so it is kept per machine as the plans are (planner/store.py):
<cache folder>/codec/<machine>-rule<N>.json, one line per codec and dtype (the 0.6B's check takes about 8 s).
A codec process decides again at its own thread count (engine/codec_process.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import torch

from omni_core.cache import cache_dir, locked, machine, write_json
from omni_core.codec import backend, packed
from omni_core.codec.streaming import StreamingDecoder, push_together

CHUNKS = (1, 2, 4, 8, 3)  # frames a push: the engine's chunk lengths, then a last, shorter chunk
ROWS = (2, 3, 8)  # streams decoded together, beside each one alone (the engine batches up to max_batch)
RULE = 2  # the way the check is made; a change of it makes every machine check again. 2: 8 streams too


def decide(codec: torch.nn.Module) -> bool:
    """Switch `codec` to batched where it holds here (`holds`, or this machine's earlier answer); → whether it did."""
    device, name = next(codec.parameters()).device, _name(codec)
    on = _read(device).get(name)
    if on is None:
        on = holds(codec)
        try:
            _write(device, name, on)
        except OSError:  # a read-only cache folder: checked again next time
            pass
    backend.use_batched(codec, on)
    return on


def usable(codec: torch.nn.Module) -> bool:
    """Whether oneDNN can run this codec's convolutions: a CPU, float32, or bfloat16 where oneDNN has kernels for it."""
    w = next(codec.parameters())
    return w.device.type == "cpu" and w.dtype in packed.packable_dtypes() and torch.backends.mkldnn.is_available()


@torch.no_grad()
def holds(codec: torch.nn.Module, seed: int = 0) -> bool:
    """Whether, batched, streams pushed together get what each gets alone, bit for bit (`ROWS` streams at a time,
    every chunk of `CHUNKS`). The codec is left as it was. A row is decoded alone when a comparison first reads it:
    where 2 rows together already differ, 2 streams alone, not 8 (the real-width 0.6B codec under exact mode's
    plain matmuls, on a Zen 3: 48 -> 14-19 s to say no; a check that holds decodes all 8 either way)."""
    if not usable(codec):
        return False
    was = backend.runs_batched(codec)
    backend.use_batched(codec, True)
    try:
        gen = torch.Generator().manual_seed(seed)
        codes = torch.randint(0, codec.cfg.codebook_size, (max(ROWS), codec.cfg.num_quantizers, sum(CHUNKS)),
                              generator=gen)
        alone: list[torch.Tensor] = []
        for rows in ROWS:
            alone += _stream([[row] for row in codes[len(alone):rows].split(1)], codec)
            together = _stream([list(codes[:rows].split(1))], codec)
            if not all(torch.equal(a, t) for a, t in zip(alone, together)):
                return False
        return True
    finally:
        backend.use_batched(codec, was)


def _stream(groups: list[list[torch.Tensor]], codec: torch.nn.Module) -> list[torch.Tensor]:
    """Each group's rows (codes [1, Q, T] each) decoded as streams pushed together, chunk by chunk → every row's
    audio, in order."""
    audio = []
    for rows in groups:
        decoders = [StreamingDecoder(codec) for _ in rows]
        parts, at = [[] for _ in rows], 0
        for n in CHUNKS:
            for part, wav in zip(parts, push_together(decoders, [r[:, :, at:at + n] for r in rows])):
                part.append(wav)
            at += n
        audio += [torch.cat(part, dim=-1) for part in parts]
    return audio


def _name(codec: torch.nn.Module) -> str:
    """What the answer depends on besides the machine: the codec's kind and shapes, and its dtype. An encoder's
    fields are left out (a decode never runs it): a checkpoint with one and a random preset without it share one
    answer (Qwen3-TTS 0.6B's, float32: a 47-58 s check on a Zen 3, made twice in the suite before)."""
    cfg = codec.cfg
    if getattr(cfg, "encoder", None) is not None:
        cfg = dataclasses.replace(cfg, encoder=None)
    digest = hashlib.sha256(repr(cfg).encode()).hexdigest()[:12]
    return f"{type(codec).__name__} {digest} {str(next(codec.parameters()).dtype).removeprefix('torch.')}"


def _path(device: torch.device) -> Path:
    return cache_dir() / "codec" / f"{machine(device)}-rule{RULE}.json"  # a new rule checks again


def _read(device: torch.device) -> dict[str, bool]:
    try:
        return {k: bool(v) for k, v in json.loads(_path(device).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _write(device: torch.device, name: str, on: bool) -> None:
    """Add one answer to this machine's file, atomically (concurrent loads each write a whole file)."""
    target = _path(device)
    with locked(target):
        write_json(target, {**_read(device), name: on})
