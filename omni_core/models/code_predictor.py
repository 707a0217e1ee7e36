"""The code predictor: codebooks 1..15 of a frame, given the talker's state and CB0.

Contract (seed M05): start from [h_talker (last layer, last position), E_talker(cb0)],
length 2; step j = 0..G-2 reads the last position, predicts CB(j+1) with
`lm_head[j]` and embeds it with `codec_embedding[j]`. Two implementations, one
signature, identical codes:

- `predict_reprefill`: recomputes the whole (≤ 16 position) sequence every step. No
  KV state, so every shape is fixed per batch size: the whole loop can be captured
  as one CUDA graph (see fast/cuda_graph.py).
- `predict_kv`: prefills 2 positions, then feeds only the new one against a KV
  cache (cache length 2, 3, 4, ... after each step); 16 positions of work, not 135.

Both return codes [B, G-1], their probabilities [B, G-1] and the codec embeddings
[B, G-1, C] (the next talker input needs them). The codec embeddings and the inputs h, e0
are as wide as the talker (C); a predictor narrower than its talker (Qwen3-TTS 1.7B) maps
every input through `small_to_mtp_projection` (C → its hidden size) first; with `alternatives=k` also the k most
probable codes of each step [B, G-1, k] and their probabilities (same distribution, same
step: the engine asks for 5, for the app's frame inspector). When sampling, the noise for all
G-1 steps is drawn up front from the caller's generator (`frame_noise`), so the
eager, KV and graph versions draw identical codes for one seed.
"""

from __future__ import annotations

import torch
from torch import nn

from omni_core.models.config import DecoderConfig
from omni_core.models.decoder import DecoderStack
from omni_core.models.layers import Linear
from omni_core.models.sampling import SamplingConfig, choose_with_alternatives, draw_noise

# HF's code predictor samples with its own settings, whatever the talker uses.
PREDICTOR_SAMPLING = SamplingConfig(do_sample=True, temperature=1.0, top_k=50, top_p=0.8)
GREEDY = SamplingConfig()


class CodePredictorModel(DecoderStack):
    def __init__(self, cfg: DecoderConfig, num_code_groups: int, embedding_dim: int):
        super().__init__(cfg)
        self.codec_embedding = nn.ModuleList(nn.Embedding(cfg.vocab_size, embedding_dim)
                                             for _ in range(num_code_groups - 1))
        for layer in self.layers:  # every request's rows share its calls: attention on one thread
            layer.self_attn.serial = True


class CodePredictor(nn.Module):
    """talker.code_predictor.*

    embedding_dim: the talker's width (None: the predictor's own, as in Qwen3-Omni).
    sampling: how the predictor samples when a request samples (Qwen3-Omni's HF code fixes
    PREDICTOR_SAMPLING; Qwen3-TTS reads its `subtalker_*` generation settings)."""

    def __init__(self, cfg: DecoderConfig, num_code_groups: int, embedding_dim: int | None = None,
                 sampling: SamplingConfig | None = None):
        super().__init__()
        self.num_code_groups = num_code_groups
        self.embedding_dim = embedding_dim or cfg.hidden_size
        self.sampling = sampling or PREDICTOR_SAMPLING
        self.model = CodePredictorModel(cfg, num_code_groups, self.embedding_dim)
        self.lm_head = nn.ModuleList(Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
                                     for _ in range(num_code_groups - 1))
        self.small_to_mtp_projection = (Linear(self.embedding_dim, cfg.hidden_size, bias=True)
                                        if self.embedding_dim != cfg.hidden_size else None)

    def forward(self, x: torch.Tensor, cache=None, start: int = 0) -> torch.Tensor:
        """Inputs [B, T, C] (talker width) → the predictor's normed hidden states [B, T, H]."""
        if self.small_to_mtp_projection is not None:
            x = self.small_to_mtp_projection(x)
        return self.model(x, cache, start)

    def forward_groups(self, groups: list[tuple[torch.Tensor, object]]) -> list[torch.Tensor]:
        """Groups of rows alike, each (inputs [B_g, T_g, C] at talker width, its batched cache or None), in one
        call → each group's normed hidden states [B_g, T_g, H] (`DecoderStack.forward_groups`)."""
        groups = [(x, cache) for x, cache in groups if x.shape[0]]
        x = torch.cat([x.reshape(1, -1, x.shape[-1]) for x, _ in groups], dim=1)  # [1, N, C]
        if self.small_to_mtp_projection is not None:
            x = self.small_to_mtp_projection(x)
        h = self.model.forward_groups(x, [(g.shape[0], g.shape[1], cache) for g, cache in groups])
        return [part.view(g.shape[0], g.shape[1], -1) for part, (g, _) in
                zip(h[0].split([g.shape[0] * g.shape[1] for g, _ in groups]), groups)]

    def step(self, j: int, last_hidden: torch.Tensor, sampling: SamplingConfig, noise: torch.Tensor | None,
             greedy_rows: torch.Tensor | None = None, alternatives: int = 0):
        """last_hidden [B, C] → CB(j+1) ids [B], probs [B], embedding [B, C], top ids [B, k], top probs [B, k]."""
        code, prob, top_ids, top_probs = choose_with_alternatives(
            self.lm_head[j](last_hidden), sampling, noise=None if noise is None else noise[j],
            greedy_rows=greedy_rows, k=alternatives)
        return code, prob, self.model.codec_embedding[j](code), top_ids, top_probs

    def frame_noise(self, batch: int, sampling: SamplingConfig, generator: torch.Generator | None,
                    device) -> torch.Tensor | None:
        """Exp(1) noise [G-1, B, V] for one frame, or None when greedy."""
        if not sampling.do_sample:
            return None
        vocab = self.lm_head[0].out_features
        return draw_noise((self.num_code_groups - 1, batch, vocab), generator, device)


@torch.no_grad()
def predict_reprefill(cp: CodePredictor, h_talker: torch.Tensor, e_cb0: torch.Tensor,
                      sampling: SamplingConfig = GREEDY, generator: torch.Generator | None = None,
                      noise: torch.Tensor | None = None, greedy_rows: torch.Tensor | None = None,
                      alternatives: int = 0):
    """h_talker, e_cb0: [B, C] → codes [B, G-1], probs [B, G-1], embeds [B, G-1, C]
    (+ top codes [B, G-1, k], top probs [B, G-1, k] when alternatives=k > 0).
    greedy_rows [B] bool: rows of a sampling batch that decode greedily (see `choose`)."""
    if noise is None:
        noise = cp.frame_noise(h_talker.shape[0], sampling, generator, h_talker.device)
    seq = torch.stack([h_talker, e_cb0], dim=1)  # [B, 2, C]
    steps = []
    for j in range(cp.num_code_groups - 1):
        hidden = cp(seq)  # the whole sequence, no cache
        steps.append(cp.step(j, hidden[:, -1], sampling, noise, greedy_rows, alternatives))
        seq = torch.cat([seq, steps[-1][2][:, None]], dim=1)  # [B, j+3, C]
    return _stacked(steps, alternatives)


@torch.no_grad()
def predict_kv(cp: CodePredictor, h_talker: torch.Tensor, e_cb0: torch.Tensor,
               sampling: SamplingConfig = GREEDY, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None, greedy_rows: torch.Tensor | None = None, on_step=None,
               alternatives: int = 0):
    """Same contract as `predict_reprefill`; `on_step(cache)` is called after each forward (tests)."""
    G = cp.num_code_groups
    if noise is None:
        noise = cp.frame_noise(h_talker.shape[0], sampling, generator, h_talker.device)
    cache = cp.model.new_cache(h_talker.shape[0], G, like=h_talker)
    x = torch.stack([h_talker, e_cb0], dim=1)  # [B, 2, C] first, then [B, 1, C]
    steps = []
    for j in range(G - 1):
        hidden = cp(x, cache, start=cache.length)
        if on_step is not None:
            on_step(cache)
        steps.append(cp.step(j, hidden[:, -1], sampling, noise, greedy_rows, alternatives))
        x = steps[-1][2][:, None]  # only the new position
    return _stacked(steps, alternatives)


@torch.no_grad()
def predict_both(cp: CodePredictor, kv: torch.Tensor, h_talker: torch.Tensor, e_cb0: torch.Tensor,
                 sampling: SamplingConfig = GREEDY, noise: torch.Tensor | None = None,
                 greedy_rows: torch.Tensor | None = None, alternatives: int = 0):
    """Rows of both predictors in one pass a step: kv [B] bool, True where a row runs `predict_kv`, False where
    it runs `predict_reprefill`; the rest as their contract. Each step packs the KV rows' new positions and the
    re-prefill rows' whole sequences into one sequence: every matmul, the head and the choice run once for all
    rows, and each kind attends as a batch of its own, so a row gets the floats its own kind's call gives it."""
    G, B = cp.num_code_groups, h_talker.shape[0]
    order = torch.cat([kv.nonzero()[:, 0], (~kv).nonzero()[:, 0]])  # the KV rows first
    nk = int(kv.sum())
    if noise is not None:
        noise = noise[:, order]
    if greedy_rows is not None:
        greedy_rows = greedy_rows[order]
    cache = cp.model.new_cache(nk, G, like=h_talker)
    x = torch.stack([h_talker[order], e_cb0[order]], dim=1)  # [B, 2, C]
    new, seq = x[:nk], x[nk:]  # the KV rows' new positions; the re-prefill rows' whole sequences
    steps = []
    for j in range(G - 1):
        hidden = cp.forward_groups([(new, cache), (seq, None)])
        last = torch.cat([part[:, -1] for part in hidden])  # [B, H], the KV rows first
        steps.append(cp.step(j, last, sampling, noise, greedy_rows, alternatives))
        embeds = steps[-1][2][:, None]  # [B, 1, C]
        new, seq = embeds[:nk], torch.cat([seq, embeds[nk:]], dim=1)
    back = torch.empty_like(order)
    back[order] = torch.arange(B, device=order.device)
    return tuple(out[back] for out in _stacked(steps, alternatives))


def frame_embedding(codec_embedding: nn.Embedding, cb0: torch.Tensor, residual_embeds: torch.Tensor) -> torch.Tensor:
    """The talker's next input from a frame: cb0 [B] (embedded by the talker's `codec_embedding`) and
    the predictor's embeddings of CB1..CB15 [B, G-1, C] → their sum [B, 1, C], over one stacked axis
    as HF sums it, so the floats agree."""
    every = torch.cat([codec_embedding(cb0)[:, None], residual_embeds], dim=1)
    return every.sum(1, keepdim=True)


def _stacked(steps: list[tuple], alternatives: int) -> tuple[torch.Tensor, ...]:
    """Per-step (code, prob, embed, top ids, top probs) → codes [B, G-1], probs, embeds [B, G-1, C]
    (+ top codes, top probs [B, G-1, k])."""
    num = 5 if alternatives else 3
    return tuple(torch.stack([step[i] for step in steps], 1) for i in range(num))
