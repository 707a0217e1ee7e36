"""The code predictor's fast path, chosen once per pipeline, called once per step for all rows.

`Predictors.run(kind, h, e0, generators, use_graph)` predicts CB1..CB15 for every row of a batch in one call:
"reprefill" replays a CUDA graph on CUDA (unless a request opts out), runs the compiled
frame with `compile=True`, else eager; "kv" is compiled or eager. A batch whose rows all decode
greedily (the default) draws no noise and, compiled, runs the greedy-only frame. Rows may mix greedy
and sampled requests: each sampled row's noise comes from its own generator, greedy rows
take the argmax (`choose(greedy_rows=...)`), so a row gets what it gets alone. Every path also
returns each code's top-5 alternatives, computed in the same call (`alternatives=5`).
"""

from __future__ import annotations

import torch

from omni_core.fast.buckets import chunks
from omni_core.models.code_predictor import GREEDY, CodePredictor, predict_kv, predict_reprefill
from omni_core.models.sampling import TOP_K_ALTERNATIVES

EAGER = {"reprefill": predict_reprefill, "kv": predict_kv}


class Predictors:
    def __init__(self, cp: CodePredictor, device: torch.device, compiled: bool = False):
        self.cp, self.device = cp, device
        self.compiled = None
        if compiled:
            from omni_core.fast.compiled import CompiledPredictors
            self.compiled = CompiledPredictors(cp)
        self._graph = None
        self.calls = 0  # predictor calls made (tests: one per kind per step, whatever the batch)

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

    def warm_up(self, max_rows: int, report=None) -> None:
        """Compile or load (compile=True) and capture (CUDA) every bucket a batch of up to max_rows rows
        uses; report(message) is told about each compiled frame."""
        if self.compiled is not None:
            self.compiled.warm_up(max_rows, report)
        if self.device.type == "cuda":
            self.graph.warm_up(max_rows)

    def _run(self, kind: str, h: torch.Tensor, e0: torch.Tensor, generators: list[torch.Generator | None],
             use_graph: bool):
        sample = [g is not None for g in generators]
        if not any(sample) and not use_graph:  # every row greedy: no noise, the greedy-only compiled frame
            if self.compiled is not None:
                return self.compiled.run(kind, h, e0)
            return EAGER[kind](self.cp, h, e0, GREEDY, alternatives=TOP_K_ALTERNATIVES)
        noise = torch.cat([self.cp.frame_noise(1, self.cp.sampling, g, self.device) if g is not None
                           else torch.ones(self.cp.num_code_groups - 1, 1, self.cp.lm_head[0].out_features,
                                           device=self.device) for g in generators], dim=1)  # [G-1, B, V]
        greedy_rows = torch.tensor([not s for s in sample], device=self.device)
        if use_graph:
            return self.graph.run(h, e0, noise, greedy_rows)
        if self.compiled is not None:
            return self.compiled.run(kind, h, e0, noise, greedy_rows)
        return EAGER[kind](self.cp, h, e0, self.cp.sampling, noise=noise,
                           greedy_rows=greedy_rows if not all(sample) else None, alternatives=TOP_K_ALTERNATIVES)
