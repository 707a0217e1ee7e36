"""Teacher-forced scoring: how likely the model finds a given take, code by code (`Pipeline.score`).

A request's prompt is built and prefilled as the engine builds it (`Runner`); then, frame by frame, the
talker's hidden state gives CB0's distribution and the code predictor CB1..CB15's, each fed the *given*
codes instead of its own choices. Every distribution is the processed one the engine draws from (repetition
penalty and suppression for CB0; the request's temperature / top-k / top-p when it samples, the predictor's
own settings for CB1..15), so for a take the engine generated, each given code's probability and its
alternatives are the ones the engine reported (`Result.probs`, `top_codes`, `top_probs`), bit for bit in
the default mode: the same calls at one row, and rows are batch-invariant. It runs in the engine's thread
between steps, one frame at a time (`scoring` yields after the prompt and after each frame, and the
pipeline hands each part to the engine as its own call), so the requests being generated go on between
a long take's frames instead of waiting for the whole score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from omni_core.engine.runner import Runner
from omni_core.engine.sequence import Sequence
from omni_core.models.code_predictor import GREEDY
from omni_core.models.sampling import TOP_K_ALTERNATIVES, SamplingConfig, repetition_penalty, suppress, warp


@dataclass
class Score:
    """A take scored under the model (teacher-forced), frame by frame and codebook by codebook."""

    codes: np.ndarray  # int64 [T, 16]: the codes scored
    logprobs: np.ndarray  # float32 [T, 16]: log-probability of each given code (-inf: the distribution excludes it)
    probs: np.ndarray  # float32 [T, 16]: its probability (as Result.probs)
    top_codes: np.ndarray  # int64 [T, 16, k]: each codebook's k most probable codes there, most probable first
    top_probs: np.ndarray  # float32 [T, 16, k]: their probabilities
    prompt_ids: list[int]
    text_ids: list[int]  # the ids spoken (chat mode: the reply the thinker wrote for the request)
    # float32 [T, 16, V]: each whole distribution (score(..., keep=True); a codebook with a smaller vocabulary
    # than the largest is padded with zeros), for comparing two models' distributions (benchmarks/int8_fidelity.py)
    distributions: np.ndarray | None = None

    @property
    def mean_logprob(self) -> float:
        """The mean log-probability per code (nan for no frames)."""
        return float(self.logprobs.mean()) if self.logprobs.size else float("nan")


def distribution(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The processed distribution `sampling.choose_with_alternatives` draws from: logits [B, V] → probs [B, V]."""
    logits = logits.float()
    return (warp(logits, sampling) if sampling.do_sample else logits).softmax(dim=-1)


def _cell(probs: torch.Tensor, code: int, k: int) -> tuple[float, np.ndarray, np.ndarray]:
    """probs [1, V] → (the given code's probability, top ids [k], top probs [k]) (as sampling._top)."""
    top_probs, top_ids = torch.topk(probs, k, dim=-1)
    return float(probs[0, code]), top_ids[0].cpu().numpy(), top_probs[0].float().cpu().numpy()


def score(runner: Runner, seq: Sequence, codes: np.ndarray, k: int = TOP_K_ALTERNATIVES, keep: bool = False) -> Score:
    """Teacher-forced scores of `codes` [T, 16] for the (checked) request in `seq`, all at once; in the engine's
    thread. keep: the whole distributions too (`Score.distributions`)."""
    with torch.no_grad():
        for done in scoring(runner, seq, codes, k, keep):
            if done is not None:
                return done


def scoring(runner: Runner, seq: Sequence, codes: np.ndarray, k: int = TOP_K_ALTERNATIVES,
            keep: bool = False) -> Iterator[Score | None]:
    """`score` in parts, each advanced in the engine's thread (where autograd is off): None after the prompt and
    after each frame, then the Score. (No context manager is held across its yields: a generator closed in
    another thread would run its exit there, e.g. turn autograd off in the caller's thread.)"""
    m, req = runner.model, seq.req
    T, G = codes.shape
    runner.admit(seq, audio=False)
    while seq.thinker_todo is not None:  # chat mode: the thinker's prompt, then its whole reply
        runner.prefill_thinker(seq)
    while seq.thinking:
        runner.take_token(seq, runner.think([seq])[0])
    if T and not seq.reply.spoken:
        raise ValueError("the reply ended at its first token: there is nothing spoken to score")
    runner.start_talker(seq)
    while seq.talker_todo is not None:
        runner.prefill_talker(seq)
    yield None
    cp = m.talker.code_predictor
    kind = "kv" if req.predictor == "kv" else "reprefill"  # the predictor whose codes a take reports
    predictor_sampling = cp.sampling if req.do_sample else GREEDY
    probs, top_codes, top_probs = (np.zeros((T, G), np.float32), np.zeros((T, G, k), np.int64),
                                   np.zeros((T, G, k), np.float32))
    given = torch.as_tensor(codes, dtype=torch.long, device=m.device)
    kept = np.zeros((T, G, max(m.talker.codec_head.out_features, cp.lm_head[0].out_features)), np.float32) if keep else None
    for t in range(T):
        if t:
            seq.hidden = runner.talk([seq])[0]
        logits = m.talker.codec_head(seq.hidden)  # [1, V]
        logits = suppress(repetition_penalty(logits, seq.history, req.repetition_penalty),
                          m.cb0_mask(seq.history.shape[1]))
        dist = distribution(logits, seq.sampling)
        probs[t, 0], top_codes[t, 0], top_probs[t, 0] = _cell(dist, codes[t, 0], k)
        if keep:
            kept[t, 0, :dist.shape[-1]] = dist[0].cpu().numpy()
        cb0 = given[t, :1]
        seq.history = torch.cat([seq.history, cb0[:, None]], dim=1)
        embeds = []
        x = torch.stack([seq.hidden, m.talker.model.codec_embedding(cb0)], dim=1)  # [1, 2, C]
        cache = cp.model.new_cache(1, G, like=seq.hidden) if kind == "kv" else None
        for j in range(G - 1):
            hidden = cp(x, cache, start=cache.length) if cache is not None else cp(x)
            dist = distribution(cp.lm_head[j](hidden[:, -1]), predictor_sampling)
            probs[t, j + 1], top_codes[t, j + 1], top_probs[t, j + 1] = _cell(dist, codes[t, j + 1], k)
            if keep:
                kept[t, j + 1, :dist.shape[-1]] = dist[0].cpu().numpy()
            embeds.append(cp.model.codec_embedding[j](given[t, j + 1:j + 2]))  # [1, C]
            x = embeds[-1][:, None] if cache is not None else torch.cat([x, embeds[-1][:, None]], dim=1)
        seq.codes.append(codes[t])
        seq.last_cb0, seq.last_embeds = cb0, torch.stack(embeds, 1)
        yield None
    seq.release()
    with np.errstate(divide="ignore"):
        logprobs = np.log(probs)
    yield Score(codes.astype(np.int64), logprobs.astype(np.float32), probs, top_codes, top_probs,
                list(seq.prompt_ids), list(seq.reply.spoken), kept)
