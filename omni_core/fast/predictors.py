"""The code predictor's fast path, chosen once per pipeline, called once per step for all rows.

`Predictors.run_rows(kinds, graphs, h, e0, generators)` predicts CB1..CB15 for every row of a step, each
row on its own kind: eager, one pass for both kinds (`predict_both`: every matmul once for all rows); in
exact mode, and for the compiled predictor and CUDA graphs (each runs one kind), one `run` per
(kind, graph).
`Predictors.run(kind, h, e0, generators, use_graph)` predicts for rows of one kind in one call:
"reprefill" replays a CUDA graph on CUDA (unless a request opts out), runs the compiled
predictor step with `compile=True`, else eager; "kv" is compiled or eager. A batch whose rows all decode
greedily (the default) draws no noise and, compiled, runs the greedy-only units. Rows may mix greedy
and sampled requests: each sampled row's noise comes from its own generator, greedy rows
take the argmax (`choose(greedy_rows=...)`), so a row gets what it gets alone. Every path also
returns each code's top-5 alternatives, computed in the same call (`alternatives=5`).
"""

from __future__ import annotations

import torch

from omni_core.fast.buckets import chunks
from omni_core.models.code_predictor import GREEDY, CodePredictor, predict_both, predict_kv, predict_reprefill
from omni_core.models.sampling import TOP_K_ALTERNATIVES

EAGER = {"reprefill": predict_reprefill, "kv": predict_kv}


class Predictors:
    def __init__(self, cp: CodePredictor, device: torch.device, compiled: bool = False, exact: bool = False):
        """exact: each kind in a call of its own, as the official code calls it (one pass for both packs their
        positions into one matmul, whose plain kernel rounds by the call's rows)."""
        self.cp, self.device, self.exact = cp, device, exact
        self.compiled = None
        if compiled:
            from omni_core.fast.compiled import CompiledPredictors
            self.compiled = CompiledPredictors(cp)
        self._graph = None
        self.calls = 0  # predictor calls made (tests: one a step eager, one per kind compiled, whatever the batch)

    @property
    def graph(self):
        """The CUDA-graph predictor, built on first use (it allocates static buffers)."""
        if self._graph is None:
            from omni_core.fast.cuda_graph import GraphPredictor
            self._graph = GraphPredictor(self.cp)
        return self._graph

    def uses_graph(self, kind: str, cuda_graph: bool | None) -> bool:
        return kind == "reprefill" and self.device.type == "cuda" and cuda_graph is not False

    def run(self, kind: str, h: torch.Tensor, e0: torch.Tensor, generators: list[torch.Generator | None],
            use_graph: bool = False):
        """h, e0 [B, C]; generators[b] is row b's (None: greedy) → codes [B, 15], probs [B, 15], embeds [B, 15, C],
        top codes [B, 15, 5], top probs [B, 15, 5]. More rows than the largest bucket run as bucket-size
        chunks (rows are independent: each gets what it gets in any batch)."""
        self.calls += 1
        parts = [self._run(kind, h[rows], e0[rows], generators[rows], use_graph) for rows in chunks(h.shape[0])]
        return parts[0] if len(parts) == 1 else tuple(torch.cat(out) for out in zip(*parts))

    def run_rows(self, kinds: list[str], graphs: list[bool], h: torch.Tensor, e0: torch.Tensor,
                 generators: list[torch.Generator | None]):
        """Row b on its own kind kinds[b] ("reprefill", "kv"; on a CUDA graph where graphs[b]): h, e0 [B, C] →
        `run`'s outputs for the rows in their order (a row twice, once per kind, gets both)."""
        if not self.exact and self.compiled is None and not any(graphs):
            self.calls += 1
            sampling, noise, greedy_rows = self._choice(generators)
            return predict_both(self.cp, torch.tensor([k == "kv" for k in kinds]), h, e0, sampling, noise,
                                greedy_rows, alternatives=TOP_K_ALTERNATIVES)
        groups: dict[tuple, list[int]] = {}
        for b, key in enumerate(zip(kinds, graphs)):
            groups.setdefault(key, []).append(b)
        out = None
        for (kind, graph), rows in groups.items():
            made = self.run(kind, h[rows], e0[rows], [generators[b] for b in rows], graph)
            out = out or [x.new_empty((len(kinds), *x.shape[1:])) for x in made]
            for whole, part in zip(out, made):
                whole[rows] = part
        return tuple(out)

    def warm_up(self, max_rows: int, report=None) -> None:
        """Compile or load (compile=True) and capture (CUDA) every bucket a batch of up to max_rows rows
        uses; report(message) is told about each compiled unit."""
        if self.compiled is not None:
            self.compiled.warm_up(max_rows, report)
        if self.device.type == "cuda":
            self.graph.warm_up(max_rows)

    def _run(self, kind: str, h: torch.Tensor, e0: torch.Tensor, generators: list[torch.Generator | None],
             use_graph: bool):
        sampling, noise, greedy_rows = self._choice(generators)
        if noise is None and not use_graph:  # every row greedy: no noise, the greedy-only compiled units
            if self.compiled is not None:
                return self.compiled.run(kind, h, e0)
            return EAGER[kind](self.cp, h, e0, GREEDY, alternatives=TOP_K_ALTERNATIVES)
        if noise is None:  # (a graph always takes noise: ones, unused by its greedy rows)
            noise = self._noise(generators)
        if use_graph:
            return self.graph.run(h, e0, noise, greedy_rows)
        if self.compiled is not None:
            return self.compiled.run(kind, h, e0, noise, greedy_rows)
        return EAGER[kind](self.cp, h, e0, sampling, noise=noise, greedy_rows=greedy_rows,
                           alternatives=TOP_K_ALTERNATIVES)

    def _choice(self, generators: list[torch.Generator | None]):
        """How rows choose their codes → (sampling, noise [G-1, B, V] or None, greedy_rows [B] bool): every row
        greedy, GREEDY and no noise; else the predictor's sampling, each sampled row's noise drawn from its own
        generator and greedy rows marked (they take the argmax: `choose`), so a row gets what it gets alone."""
        greedy_rows = torch.tensor([g is None for g in generators], device=self.device)
        if greedy_rows.all():
            return GREEDY, None, greedy_rows
        return self.cp.sampling, self._noise(generators), greedy_rows

    def _noise(self, generators: list[torch.Generator | None]) -> torch.Tensor:
        """[G-1, B, V]: a sampled row's frame noise from its generator, ones for a greedy row (None)."""
        ones = (self.cp.num_code_groups - 1, 1, self.cp.lm_head[0].out_features)
        return torch.cat([self.cp.frame_noise(1, self.cp.sampling, g, self.device) if g is not None
                          else torch.ones(ones, device=self.device) for g in generators], dim=1)
