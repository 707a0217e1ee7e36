"""The re-prefill code predictor as one CUDA graph per batch-size bucket.

Re-prefill has no KV state, so a frame's whole 15-step loop (layers, lm_heads,
sampling and its top-5 alternatives, codec embeddings) runs with the same shapes every time for a given
batch size: it is captured once per bucket (fast/buckets.py) and replayed.
Static buffers are sized for the largest bucket; a call copies its rows into
`[:B]`, replays the graph of the smallest bucket that fits, and clones `[:B]` of
the outputs (rows are independent, so the unused rows do not matter). Batches
larger than the largest bucket come in bucket-size chunks (`Predictors.run`); every
bucket up to the engine's max_batch is captured at warm-up, not while serving. Sampling reads Exp(1) noise from a static buffer, drawn by
each row's seeded generator before each replay, so a seed gives the codes the
eager predictor gives; greedy rows are marked in a static mask (`choose`). One lock guards the shared static buffers: each call
overwrites every input it uses, so nothing passes from one request to another.
"""

from __future__ import annotations

import threading

import torch

from omni_core.fast.buckets import BUCKETS, buckets_up_to
from omni_core.models.code_predictor import CodePredictor, predict_reprefill
from omni_core.models.sampling import TOP_K_ALTERNATIVES



class GraphPredictor:
    def __init__(self, cp: CodePredictor, buckets: tuple[int, ...] = BUCKETS):
        self.cp, self.buckets = cp, buckets
        weight = cp.model.codec_embedding[0].weight
        B, C, V, G = max(buckets), cp.embedding_dim, cp.lm_head[0].out_features, cp.num_code_groups
        dev, dt = weight.device, weight.dtype
        self.h = torch.zeros(B, C, dtype=dt, device=dev)  # static inputs
        self.e0 = torch.zeros(B, C, dtype=dt, device=dev)
        self.noise = torch.ones(G - 1, B, V, dtype=torch.float32, device=dev)
        self.greedy_rows = torch.ones(B, dtype=torch.bool, device=dev)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, tuple]] = {}
        self.pool = None
        self.lock = threading.Lock()

    def bucket(self, batch: int) -> int | None:
        return next((b for b in self.buckets if b >= batch), None)

    @torch.no_grad()
    def run(self, h: torch.Tensor, e0: torch.Tensor, noise: torch.Tensor, greedy_rows: torch.Tensor):
        """`predict_reprefill` with the predictor's sampling, `noise` [G-1, B, V] and `greedy_rows` [B]
        (one graph per bucket serves greedy and sampled rows together)."""
        B = h.shape[0]
        size = self.bucket(B)
        if size is None:
            raise ValueError(f"{B} rows: the CUDA-graph predictor takes at most {max(self.buckets)} at once")
        with self.lock:
            graph, out = self.graphs.get(size) or self._capture(size)
            self.h[:B].copy_(h)
            self.e0[:B].copy_(e0)
            self.noise[:, :B].copy_(noise)
            self.greedy_rows[:B].copy_(greedy_rows)
            graph.replay()
            return tuple(t[:B].clone() for t in out)

    @torch.no_grad()
    def warm_up(self, max_rows: int) -> None:
        """Capture every bucket a batch of up to `max_rows` rows uses."""
        with self.lock:
            for size in buckets_up_to(max_rows):
                if size not in self.graphs:
                    self._capture(size)

    def _capture(self, size: int):
        """Warm up on a side stream, then capture into the shared memory pool."""
        args = (self.cp, self.h[:size], self.e0[:size], self.cp.sampling)
        kwargs = dict(noise=self.noise[:, :size], greedy_rows=self.greedy_rows[:size], alternatives=TOP_K_ALTERNATIVES)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                predict_reprefill(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = predict_reprefill(*args, **kwargs)
        self.pool = graph.pool()
        self.graphs[size] = (graph, out)
        return graph, out
