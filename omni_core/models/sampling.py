"""Choosing a token from logits, as HF `generate` does.

Order (HF's): repetition penalty → suppressed ids → (sampling only) temperature →
top-k → top-p. Greedy takes the argmax of the processed logits. Sampling uses an
exponential race (argmax of p / Exp(1) noise), which draws exactly from p, needs
no host sync and runs inside a CUDA graph. The probability of the chosen id under
the processed distribution is returned alongside it (the app draws it), and
`choose_with_alternatives` adds the top 5 of that distribution (the app's frame inspector).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

TOP_K_ALTERNATIVES = 5  # alternatives per chosen code that Frame carries (the app's inspector)


@dataclass(frozen=True)
class SamplingConfig:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    # With top-k on: top-p over the k survivors only (`top_p_of_top_k`: the default mode's cut and the compiled
    # frames'), not over HF's sort of the whole vocabulary (exact mode)
    top_p_of_top_k: bool = False

    @classmethod
    def of(cls, request, top_p_of_top_k: bool = False) -> "SamplingConfig":
        """The sampling a SpeechRequest asks for (greedy unless do_sample)."""
        return cls(request.do_sample, request.temperature, request.top_k, request.top_p, top_p_of_top_k)


def repetition_penalty(logits: torch.Tensor, history: torch.Tensor | None, penalty: float) -> torch.Tensor:
    """logits: [B, V]; history: [B, L] ids already generated. HF: divide positive, multiply negative."""
    if history is None or history.numel() == 0 or penalty == 1.0:
        return logits
    score = torch.gather(logits, 1, history)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(1, history, score)


def suppress(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """mask: [V] bool, True for ids that must never be chosen."""
    return logits if mask is None else logits.masked_fill(mask, float("-inf"))


def warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, top-k, top-p (sampling only), as HF's warpers."""
    if cfg.temperature != 1.0:
        logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_p < 1.0 and (cfg.top_p_of_top_k or torch.compiler.is_compiling()):
        return top_p_of_top_k(logits, cfg)
    if cfg.top_k:
        kth = torch.topk(logits, min(cfg.top_k, logits.shape[-1]))[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative <= (1 - cfg.top_p)
        drop[..., -1:] = False  # keep at least one
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return logits


def top_p_of_top_k(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Top-k, then top-p over the k survivors only: `warp`'s cut in the default mode and in compiled frames
    (exact mode's is HF's: a sort of the whole vocabulary, per row and codebook, the largest part of a sampled
    frame's sampling). After top-k all but k ids are -inf: HF's sort puts them first and they add exact zeros
    to the cumulative sum, so the cut is the same, except (1) the softmax over the k survivors sums k values,
    not V with zeros among them, so a probability may differ in its last bit (a cut that flips needs a
    cumulative sum within an ulp of 1 - top_p) and (2) an exact tie at the k-th largest logit keeps k ids
    where HF keeps every tied one."""
    values, ids = torch.topk(logits, min(cfg.top_k, logits.shape[-1]))  # [B, k], largest first
    values, ids = values.flip(-1), ids.flip(-1)  # ascending, as HF's sort puts them
    drop = values.softmax(dim=-1).cumsum(dim=-1) <= (1 - cfg.top_p)
    drop[..., -1:] = False  # keep at least one
    kept = values.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(1, ids, kept)


def draw_noise(shape: tuple[int, ...], generator: torch.Generator | None, device) -> torch.Tensor:
    """Exp(1) noise for `choose`, drawn ahead so a CUDA graph can read it from a static buffer: -log U for U
    uniform on [0, 1), which is Exp(1) (U = 0 gives +inf: that id's p / noise is 0, never NaN). On a CPU it
    costs a fraction of `exponential_` (benchmarks/predictor_calls.py)."""
    return torch.rand(shape, dtype=torch.float32, device=device, generator=generator).log_().neg_()


def choose(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None,
           noise: torch.Tensor | None = None, greedy_rows: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits: [B, V] (already penalised/suppressed) → ids [B] int64, probability of each id [B] float32.
    Sampling reads `noise` [B, V] when given, else draws it from `generator`. `greedy_rows` [B] bool
    (sampling only) marks rows of a mixed batch that decode greedily: they get exactly what a greedy
    call gives them, so one call serves requests with different settings."""
    ids, prob, _, _ = choose_with_alternatives(logits, cfg, generator, noise, greedy_rows, k=0)
    return ids, prob


def choose_with_alternatives(logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None = None,
                             noise: torch.Tensor | None = None, greedy_rows: torch.Tensor | None = None,
                             k: int = TOP_K_ALTERNATIVES):
    """`choose`, plus the k most probable ids [B, k] int64 and their probabilities [B, k] float32 under
    the same processed distribution the id was drawn from (greedy: softmax of the logits; sampling: after
    temperature / top-k / top-p). Fixed shapes, no host sync: it runs inside compiled frames and CUDA
    graphs. k=0 skips them (None, None). The chosen id and its probability are exactly `choose`'s."""
    logits = logits.float()
    if not cfg.do_sample:
        probs = logits.softmax(dim=-1)
        ids = logits.argmax(dim=-1)
        return (ids, probs.gather(1, ids[:, None])[:, 0], *_top(probs, k))
    if noise is None:
        noise = draw_noise(logits.shape, generator, logits.device)
    if greedy_rows is not None and _eager_on_cpu(logits) and greedy_rows.any():
        ids, probs = _sample_some(logits, cfg, noise, greedy_rows)
    else:
        probs = warp(logits, cfg).softmax(dim=-1)
        ids = (probs / noise).argmax(dim=-1)
        if greedy_rows is not None:  # a greedy row's distribution is its softmax, and its id the argmax, as alone
            probs = torch.where(greedy_rows[:, None], logits.softmax(dim=-1), probs)
            ids = torch.where(greedy_rows, logits.argmax(dim=-1), ids)
    # One top-k for every row, each over its own distribution (a compiled frame's top-k costs ~3 us a row a step)
    return (ids, probs.gather(1, ids[:, None])[:, 0], *_top(probs, k))


def _sample_some(logits: torch.Tensor, cfg: SamplingConfig, noise: torch.Tensor, greedy_rows: torch.Tensor):
    """A batch of greedy and sampled rows, eager: the warp (top-k, top-p: most of a sampled step's choice) runs
    on the sampled rows only, each row's softmax and draw as in a call of its own → ids [B], probs [B, V]."""
    sampled = (~greedy_rows).nonzero()[:, 0]
    probs, ids = logits.softmax(dim=-1), logits.argmax(dim=-1)  # the greedy rows' (the sampled rows' replaced)
    warped = warp(logits[sampled], cfg).softmax(dim=-1)
    probs[sampled] = warped
    ids[sampled] = (warped / noise[sampled]).argmax(dim=-1)
    return ids, probs


def _eager_on_cpu(x: torch.Tensor) -> bool:
    """Whether rows may be picked by value (a host sync): not in a compiled frame or a CUDA graph's capture."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def _top(probs: torch.Tensor, k: int):
    """probs [B, V] → the k largest (ids [B, k], probs [B, k]), most probable first; (None, None) for k=0."""
    if not k:
        return None, None
    top_probs, top_ids = torch.topk(probs, k, dim=-1)
    return top_ids, top_probs
