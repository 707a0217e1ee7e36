"""Compiled decode steps of the thinker and of the talker: `load_pipeline(..., compile=True)`.

`CompiledSteps` (`DecoderStack.rows_step`) runs one new token for every row of the engine's step, each row
with its own cache (projections and MoE batched through the batch-invariant matmuls, attention per row over
exactly its own past, as alone), rows padded with spare rows to their bucket. Eager decoding there is bound
by dispatch: the norms, rotations and attention between the matmuls cost milliseconds per step on a CPU,
which inductor fuses.

What is compiled is one decoder layer (units.py): the layer is an argument (its weights are graph inputs),
so the one compiled layer serves all of a stack's layers, called once per layer with that layer's slice of
every row's cache (`KVCache.layer_view`). Cache lengths and capacities are symbolic, so growing and
staggered caches run the same code; the rows of a call are not (each row's attention is its own), so each
bucket is a variant of the unit, and so is each kind of layer (a dense and a sparse MLP). The final norm
runs eagerly, as in the eager step.

Eager is the reference; compiled must give the same codes (tests/test_compiled.py).
"""

from __future__ import annotations

import functools
import os

import torch

from omni_core.fast import packages
from omni_core.fast.buckets import bucket, buckets_up_to, chunks
from omni_core.fast.units import Unit, Units
from omni_core.models.decoder import DecoderLayer, DecoderStack
from omni_core.models.layers import KVCache

SPARE_LENGTH = 2  # a padding row's cache length: its write lands on the same slot every step


def layer_rows(layer: DecoderLayer, h, cos, sin, caches: list[KVCache]):
    """`layer` for B rows, each over its own one-layer cache: h [B, 1, C], cos/sin [B, 1, 1, D] → [B, 1, C]."""
    return layer.decode_rows(h, cos, sin, caches, index=0)


class CompiledSteps(Units):
    """A stack's decode step (`DecoderStack.layers_rows`) through one compiled layer: B rows in one call per
    layer, padded with spare rows (zero inputs, caches of their own that are written, never advanced).

    A variant's guards hold for any cache of length >= 2 with a free slot after the new position (`reserve`,
    which every call ensures); a call they refuse compiles a variant for it (units.py)."""

    def __init__(self, stack: DecoderStack):
        self.stack = stack
        self.units: dict[tuple, Unit] = {}  # (dtype, device) → the layer's unit
        self._spares: list[KVCache] = []
        self._digest: str | None = None  # of the stack's shapes and plans (its weights are inputs)

    def __call__(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """layers_rows for B rows: h [B, 1, C], cos/sin [B, 1, 1, D] → [B, 1, C] (caches written, not advanced)."""
        with torch.no_grad():  # the guards hold grad mode off, as the engine runs
            parts = [self._bucket(h[rows], cos[rows], sin[rows], caches[rows]) for rows in chunks(h.shape[0])]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _bucket(self, h, cos, sin, caches: list[KVCache]) -> torch.Tensor:
        B = h.shape[0]
        pad = bucket(B) - B
        for cache in caches:
            cache.reserve(cache.length + 2)  # the free slot the guards want after the new position
        # New tensors, never views (the guards would hold the base's sizes), zero rows after: [size, ...]
        h, cos, sin = (torch.cat([t, t.new_zeros((pad, *t.shape[1:]))]) for t in (h, cos, sin))
        rows = caches + self.spares(pad, h)
        unit = self.unit(h.dtype, h.device)
        for index, layer in enumerate(self.stack.layers):
            h = unit(layer, h, cos, sin, [cache.layer_view(index) for cache in rows])
        return self.stack.norm(h)[:B]

    def spares(self, n: int, like: torch.Tensor) -> list[KVCache]:
        """n caches for padding rows (length SPARE_LENGTH), kept across calls."""
        if self._spares and (self._spares[0].k[0].dtype, self._spares[0].k[0].device) != (like.dtype, like.device):
            self._spares = []
        while len(self._spares) < n:
            cache = self.stack.new_cache(1, SPARE_LENGTH + 2, like)
            cache.length = SPARE_LENGTH
            self._spares.append(cache)
        return self._spares[:n]

    def unit(self, dtype: torch.dtype, device: torch.device) -> Unit:
        if (dtype, device) not in self.units:
            if self._digest is None:
                self._digest = packages.module_digest(self.stack)
            name = type(self.stack).__name__
            what = dict(fn="layer", stack=name, dtype=dtype, device=device.type)
            path = packages.folder() / packages.key(what, self._digest, suffix=".unit")
            self.units[dtype, device] = Unit(layer_rows, path, f"the {name} decode layer", globals())
        return self.units[dtype, device]

    def examples(self, size: int, like: torch.Tensor):
        """A call of every layer for `size` rows, on caches whose lengths and capacities all differ and exceed 1
        (sizes 0 and 1, or two equal ones, would be built in as constants)."""
        caches = []
        for b in range(size):
            cache = self.stack.new_cache(1, 2 * size + 5 + 3 * b, like)
            cache.length = 2 + b
            caches.append(cache)
        h = torch.zeros(size, 1, self.stack.cfg.hidden_size, dtype=like.dtype, device=like.device)
        cos, sin = self.stack.row_tables(caches, h)
        return [(layer, h, cos, sin, [cache.layer_view(index) for cache in caches])
                for index, layer in enumerate(self.stack.layers)]

    def pieces(self, max_rows: int) -> list:
        """What `warm_up` loads or builds: a call (taking report) per bucket a batch of up to `max_rows` rows uses."""
        like = self.stack.norm.weight

        def piece(size, report=None):
            with torch.no_grad():
                self.unit(like.dtype, like.device).ensure(self.examples(size, like), report)

        return [functools.partial(piece, size) for size in buckets_up_to(max_rows)]

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) the layer for every bucket a batch of up to `max_rows` rows uses."""
        for piece in self.pieces(max_rows):
            piece(report)


def compile_steps(stack: DecoderStack) -> CompiledSteps:
    """Give `stack` compiled decode steps (its decode_rows calls them); returns them.
    A loaded unit's C++ is built again unless inductor's cache folder still holds it: unless
    TORCHINDUCTOR_CACHE_DIR says otherwise, that folder is the cache folder's "inductor" (kept like the
    units), not torch's default in /tmp (gone at a reboot)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(packages.folder().parent / "inductor"))
    stack.rows_step = CompiledSteps(stack)
    return stack.rows_step
