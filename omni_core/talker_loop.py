"""The frame loop's engine room: one talker step and one code-predictor call per frame.

`TalkerLoop` owns a request's talker KV cache, its CB0 history (for the repetition
penalty) and its predictor(s); `SpeechRun` drives it and turns its output into events.
"""

from __future__ import annotations

import time

import torch

from .code_predictor import GREEDY, PREDICTOR_SAMPLING, predict_kv, predict_reprefill
from .sampling import SamplingConfig, choose, repetition_penalty, suppress


class TalkerLoop:
    def __init__(self, pipe, request, prompt: torch.Tensor, seed: int):
        self.pipe, self.req = pipe, request
        talker = pipe.talker
        self.cache = talker.model.new_cache(1, prompt.shape[1] + 64, like=prompt)
        self.history = torch.empty(1, 0, dtype=torch.long, device=pipe.device)  # CB0s so far
        self.sampling = SamplingConfig.of(request)
        self.predictor_sampling = PREDICTOR_SAMPLING if request.do_sample else GREEDY
        self.gen_talker = torch.Generator(pipe.device).manual_seed(seed)
        # Both predictors draw from equal streams, so compare mode compares like with like.
        self.gen_predictor = {n: torch.Generator(pipe.device).manual_seed(seed + 2) for n in ("reprefill", "kv")}
        self.use_graph = (pipe.device.type == "cuda" and request.cuda_graph is not False
                          and request.predictor in ("reprefill", "compare"))
        self.forward_ms = 0.0
        self.hidden = self._forward(prompt)  # [1, T, C]: the prompt's prefill

    @torch.no_grad()
    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        t = time.perf_counter()
        hidden = self.pipe.talker.model(x, self.cache, start=self.cache.length)[0]
        self.forward_ms = (time.perf_counter() - t) * 1000
        return hidden

    @torch.no_grad()
    def next_cb0(self) -> tuple[torch.Tensor, torch.Tensor]:
        """CB0 [1] and its probability [1], with HF's logits processing."""
        logits = self.pipe.talker.codec_head(self.hidden[:, -1])
        logits = suppress(repetition_penalty(logits, self.history, self.req.repetition_penalty),
                          self.pipe.suppress_mask)
        cb0, prob = choose(logits, self.sampling, self.gen_talker)
        self.history = torch.cat([self.history, cb0[:, None]], dim=1)
        return cb0, prob

    @torch.no_grad()
    def predict(self, cb0: torch.Tensor):
        """(codes [1, 15], probs [1, 15], embeds [1, 15, C]) and, in compare mode, the KV predictor's codes."""
        h, e0 = self.hidden[:, -1], self.pipe.talker.model.codec_embedding(cb0)
        if self.req.predictor == "kv":
            return self._kv(h, e0), None
        main = self._reprefill(h, e0)
        return main, self._kv(h, e0)[0] if self.req.predictor == "compare" else None

    def _reprefill(self, h, e0):
        gen = self.gen_predictor["reprefill"]
        if self.use_graph:
            return self.pipe.graph_predictor.run(h, e0, self.predictor_sampling, gen)
        if self.pipe.compiled is not None:
            return self.pipe.compiled.run("reprefill", h, e0, self.predictor_sampling, gen)
        return predict_reprefill(self.pipe.talker.code_predictor, h, e0, self.predictor_sampling, gen)

    def _kv(self, h, e0):
        gen = self.gen_predictor["kv"]
        if self.pipe.compiled is not None:
            return self.pipe.compiled.run("kv", h, e0, self.predictor_sampling, gen)
        return predict_kv(self.pipe.talker.code_predictor, h, e0, self.predictor_sampling, gen)

    @torch.no_grad()
    def advance(self, cb0: torch.Tensor, embeds: torch.Tensor, text_step: torch.Tensor) -> None:
        """Feed the frame back: E(cb0) + Σ codec embeddings + the text step (seed M05)."""
        self.hidden = self._forward(self.pipe.talker.embed_codes(cb0, embeds) + text_step)
