"""The compiled code predictor: `load_pipeline(..., compile=True)` (the decode steps: compiled_steps.py).

Decoding a small model in eager PyTorch is bound by dispatch, not arithmetic: a tiny predictor frame is
some 400 ops of a few µs each, and at Qwen3-TTS's widths ~75 layer-steps a frame cost ~40 ms of norms,
rotations, attention and casts. Inductor fuses those chains into a few C++ loops and launches them from C++.

What is compiled is the unit a frame repeats (units.py): one predictor step (its layers over the new
positions, the step's head, the choice of the code and its embedding), called 15 times a frame with the
step's head and embedding as arguments. The KV predictor has two: the start (2 positions on an empty cache)
and the step (1 position over a cache of 2..15); the re-prefill predictor one (its whole sequence of 2..16
positions, no cache). Sizes are symbolic, so one unit serves every step and batch size (dynamo makes variants
where the code branches on a size: units.py). Each unit comes twice (`SAMPLINGS`): greedy only (the default
request: no noise, no top-k or top-p over the vocabulary), and for every mix of greedy and sampled rows (the
sampling noise is passed in, so a seed draws the codes eager draws). Re-prefill batches run row by row
(`ROW_BY_ROW`), so a row's floats never depend on its neighbours' sequences.

Eager is the reference; compiled must give the same codes (tests/test_compiled.py). The figures:
BENCHMARKS.md, "Compiled start-up".
"""

from __future__ import annotations

import functools

import torch

from omni_core.fast import packages
from omni_core.fast.buckets import BUCKETS
from omni_core.fast.units import Unit, Units
from omni_core.models.code_predictor import GREEDY, CodePredictor
from omni_core.models.sampling import TOP_K_ALTERNATIVES, choose_with_alternatives

# Predictors whose compiled batches run row by row through 1-row steps: a re-prefill row re-runs its
# sequence every step, so B rows cost B rows' arithmetic either way; alone, its matmuls see its own rows only.
ROW_BY_ROW = ("reprefill",)
SAMPLINGS = ("greedy", "any")  # greedy-only units first
CAPACITY = 17  # a frame's KV cache: 16 positions and a free slot after the last (no size equals the end)
MAX_ROWS = BUCKETS[-1]  # the most rows one call takes (more run in chunks: Predictors.run)


def predictor_step(cp: CodePredictor, x, cos, sin, cache, head, embedding, noise=None, greedy_rows=None):
    """One step of a frame: x [B, T, C] (the new positions, talker width) at the rotations cos, sin [T, D],
    over `cache` (KV) or none (re-prefill: x is the whole sequence) → the step's code [B], its probability [B],
    its embedding [B, C] and the top-5 ids and probabilities [B, 5]. head, embedding: the step's `lm_head[j]`
    and `codec_embedding[j]`; noise [B, V] and greedy_rows [B]: the step's sampling (None: greedy)."""
    if cp.small_to_mtp_projection is not None:
        x = cp.small_to_mtp_projection(x)
    hidden = cp.model.run_layers(x, cos, sin, cache)[:, -1]
    sampling = GREEDY if noise is None else cp.sampling
    code, prob, top_ids, top_probs = choose_with_alternatives(head(hidden), sampling, noise=noise,
                                                              greedy_rows=greedy_rows, k=TOP_K_ALTERNATIVES)
    return code, prob, embedding(code), top_ids, top_probs


class CompiledPredictors(Units):
    """`predict_kv` and `predict_reprefill` as loops over compiled units (`predictor_step`), the units
    kept in the cache folder: the first process compiles them, later ones read them."""

    PARTS = {"kv": ("start", "step"), "reprefill": ("step",)}

    def __init__(self, cp: CodePredictor):
        self.cp = cp
        self.units: dict[tuple, Unit] = {}  # (name, part, sampling, dtype, device) → its unit
        self._digest: str | None = None  # of the predictor's shapes and plans (its weights are inputs)

    def run(self, name: str, h: torch.Tensor, e0: torch.Tensor, noise: torch.Tensor | None = None,
            greedy_rows: torch.Tensor | None = None):
        """The eager predictor `name` ("kv", "reprefill") for h, e0 [B, C]: greedy for every row (noise None:
        the greedy-only units), or with the predictor's sampling, `noise` [G-1, B, V] and `greedy_rows` [B]
        → codes, probs [B, G-1], embeds [B, G-1, C], top codes, top probs [B, G-1, 5]."""
        B = h.shape[0]
        if B > MAX_ROWS:
            raise ValueError(f"{B} rows: a compiled predictor frame takes at most {MAX_ROWS} at once")
        if name in ROW_BY_ROW and B > 1:  # each row through the 1-row units: what it gets alone
            rows = [self.run(name, h[b:b + 1], e0[b:b + 1], *(() if noise is None else
                                                            (noise[:, b:b + 1], greedy_rows[b:b + 1])))
                    for b in range(B)]
            return tuple(torch.cat(parts) for parts in zip(*rows))
        sampling = "greedy" if noise is None else "any"
        x = torch.stack([h, e0], dim=1)  # [B, 2, C]
        cache = self.cp.model.new_cache(B, CAPACITY, like=h) if name == "kv" else None
        steps = []
        for j in range(self.cp.num_code_groups - 1):
            part = "start" if name == "kv" and j == 0 else "step"
            start = cache.length if cache is not None else 0
            cos, sin = (t.clone() for t in self.cp.model.rope.table(start, x.shape[1], h.device, h.dtype))
            sampled = () if noise is None else (noise[j].clone(), greedy_rows)
            out = self.unit(name, part, sampling, h.dtype, h.device)(
                x, cos, sin, cache, self.cp.lm_head[j], self.cp.model.codec_embedding[j], *sampled)
            steps.append(out)
            if cache is not None:
                cache.advance(x.shape[1])
                x = out[2][:, None]  # only the new position
            else:
                x = torch.cat([x, out[2][:, None]], dim=1)  # [B, j+3, C]
        return tuple(torch.stack([step[i] for step in steps], 1) for i in range(5))

    def unit(self, name: str, part: str, sampling: str, dtype: torch.dtype, device: torch.device) -> Unit:
        what = (name, part, sampling, dtype, device)
        if what not in self.units:
            self.units[what] = Unit(functools.partial(predictor_step, self.cp), self.path(*what),
                                    f"the {name} predictor's {part} ({'greedy' if sampling == 'greedy' else 'any sampling'})",
                                    globals(), external={"cp": self.cp})
        return self.units[what]

    def path(self, name: str, part: str, sampling: str, dtype: torch.dtype, device: torch.device):
        """Where the unit lives (its name holds a digest of the predictor's shapes and plans: one of other
        shapes has units of its own; one of other weights the same ones)."""
        if self._digest is None:
            self._digest = packages.module_digest(self.cp)
        what = dict(fn=name, part=part, sampling=sampling, dtype=dtype, device=device.type)
        return packages.folder() / packages.key(what, self._digest, suffix=".unit")

    def examples(self, name: str, part: str, sampling: str, max_rows: int, dtype, device):
        """Every call the engine makes of a unit, for batches of up to max_rows rows: each batch size and
        position (guard checks cost microseconds; a variant is compiled only where none accepts a call)."""
        cp, G = self.cp, self.cp.num_code_groups
        C, V = cp.embedding_dim, cp.lm_head[0].out_features
        rows = [1] if name in ROW_BY_ROW else range(1, min(max_rows, MAX_ROWS) + 1)
        lengths = {"start": [0], "step": range(2, G)}[part] if name == "kv" else [0]
        for B in rows:
            for length in lengths:
                for T in ([2] if part == "start" else [1]) if name == "kv" else range(2, G + 1):
                    x = torch.zeros(B, T, C, dtype=dtype, device=device)
                    cache = None
                    if name == "kv":
                        cache = cp.model.new_cache(B, CAPACITY, like=x)
                        cache.length = length
                    cos, sin = (t.clone() for t in cp.model.rope.table(length, T, device, dtype))
                    sampled = () if sampling == "greedy" else (torch.ones(B, V, device=device),
                                                                torch.ones(B, dtype=torch.bool, device=device))
                    yield (x, cos, sin, cache, cp.lm_head[1], cp.model.codec_embedding[1], *sampled)

    def pieces(self, max_rows: int) -> list:
        """What `warm_up` loads or builds, in its order: a call per unit (taking report) with every shape a
        batch of up to `max_rows` rows calls it with."""
        weight = self.cp.model.codec_embedding[0].weight  # its dtype and device (a head may be int8)
        # The rotary table is filled eagerly, before any trace, so no graph builds it.
        self.cp.model.rope.table(0, self.cp.num_code_groups + 1, weight.device, weight.dtype)

        def piece(what, report=None):
            examples = self.examples(*what[:3], max_rows, weight.dtype, weight.device)
            self.unit(*what, weight.dtype, weight.device).ensure(list(examples), report)

        return [functools.partial(piece, (name, part, sampling))
                for name, parts in self.PARTS.items() for part in parts for sampling in SAMPLINGS]

    def warm_up(self, max_rows: int, report=None) -> None:
        """Load (or build) every unit a batch of up to `max_rows` rows uses (`pieces`)."""
        with torch.no_grad():
            for piece in self.pieces(max_rows):
                piece(report)
