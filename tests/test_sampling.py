"""omni_core/sampling.py against HF's logits processors and warpers (transformers.generation.logits_process),
on random and adversarial logits, and the exponential-race sampler against the distribution it should draw."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList, RepetitionPenaltyLogitsProcessor, SuppressTokensLogitsProcessor, TemperatureLogitsWarper,
    TopKLogitsWarper, TopPLogitsWarper)

from omni_core import SpeechRequest
from omni_core.models.sampling import SamplingConfig, choose, repetition_penalty, suppress, top_p_of_top_k, warp
from tests.conftest import our_pipeline

INF = float("inf")
NO_IDS = torch.empty(1, 0, dtype=torch.long)  # what HF's processors get when the talker starts from embeddings


def random_logits(B: int = 4, V: int = 97, seed: int = 0) -> torch.Tensor:
    return torch.randn(B, V, generator=torch.Generator().manual_seed(seed)) * 3


def adversarial_logits() -> dict[str, torch.Tensor]:
    """[B, V] logits that have broken samplers before: ties, -inf, a single survivor, huge spreads."""
    tie = torch.tensor([[2.0, 2.0, 2.0, 1.0, 1.0, 0.0, -1.0, -1.0]])
    return {
        "ties": tie,
        "all_equal": torch.zeros(2, 9),
        "neg_inf": torch.tensor([[-INF, 1.0, -INF, 0.5, 0.5, -3.0, -INF, 2.0]]),
        "one_finite": torch.tensor([[-INF, -INF, 0.3, -INF, -INF]]),
        "negative_only": -torch.arange(1.0, 11.0)[None],
        "huge_spread": torch.tensor([[80.0, -80.0, 79.0, 0.0, 1e-3, -1e-3]]),
        "zeros_and_signs": torch.tensor([[0.0, -0.0, 1.0, -1.0, 0.0, 2.0]]),
    }


def all_logits() -> list[tuple[str, torch.Tensor]]:
    return [("random", random_logits()), ("random_small_vocab", random_logits(3, 5, seed=1)),
            *adversarial_logits().items()]


def hf_warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """HF's sampling warpers in the order `generate` appends them (utils.py `_get_logits_processor`)."""
    chain = LogitsProcessorList()
    if cfg.temperature != 1.0:
        chain.append(TemperatureLogitsWarper(cfg.temperature))
    if cfg.top_k:
        chain.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1.0:
        chain.append(TopPLogitsWarper(cfg.top_p))
    return chain(NO_IDS.expand(len(logits), 0), logits.clone())


def assert_same_logits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal as floats, with -inf in exactly the same places."""
    assert torch.equal(torch.isneginf(got), torch.isneginf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got[finite], want[finite], rtol=0, atol=0)


# ---- repetition penalty and suppression ---------------------------------------------------------------

HISTORIES = {
    "distinct": [[3, 7, 1]],
    "repeated": [[5, 5, 5, 2, 5, 2]],  # a repeated id is penalised once, not once per occurrence
    "first_and_last": [[0, 96]],
}


@pytest.mark.parametrize("penalty", [1.05, 1.5, 0.8])
@pytest.mark.parametrize("history", HISTORIES)
def test_repetition_penalty_equals_hf(history, penalty):
    ids = torch.tensor(HISTORIES[history])
    for _, logits in [("random", random_logits(1)), ("signs", torch.linspace(-3, 3, 97)[None]),
                      ("neg_inf", random_logits(1).index_fill(1, torch.tensor([5, 7]), -INF))]:
        want = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
        assert_same_logits(repetition_penalty(logits, ids, penalty), want)


def test_repetition_penalty_per_row_history_and_no_history():
    logits = random_logits(2)
    ids = torch.tensor([[1, 2, 2], [9, 1, 40]])
    want = RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone())
    assert_same_logits(repetition_penalty(logits, ids, 1.3), want)
    assert repetition_penalty(logits, NO_IDS.expand(2, 0), 1.3) is logits  # first frame: nothing to penalise
    assert repetition_penalty(logits, ids, 1.0) is logits


def test_repetition_penalty_leaves_the_callers_logits_alone():
    logits = random_logits(1)
    before = logits.clone()
    repetition_penalty(logits, torch.tensor([[3, 4]]), 1.5)
    assert torch.equal(logits, before)


def test_suppress_equals_hf():
    V, eos = 3072, 2150  # the talker's: the last 1024 ids suppressed except codec EOS, as HF generate does
    ids = [i for i in range(V - 1024, V) if i != eos]
    mask = torch.zeros(V, dtype=torch.bool)
    mask[ids] = True
    logits = random_logits(2, V)
    logits[0, 7] = -INF
    assert_same_logits(suppress(logits, mask), SuppressTokensLogitsProcessor(ids)(NO_IDS, logits.clone()))
    assert torch.isfinite(suppress(logits, mask)[:, eos]).all()
    assert suppress(logits, None) is logits


# ---- warpers -----------------------------------------------------------------------------------------------

WARPS = [
    SamplingConfig(True, 0.9, 50, 1.0),  # HF's talker defaults
    SamplingConfig(True, 1.0, 50, 0.8),  # HF's code predictor
    SamplingConfig(True, 0.7, 0, 1.0),  # temperature only
    SamplingConfig(True, 1.3, 3, 1.0),  # top-k inside or at the edge of a tie
    SamplingConfig(True, 1.0, 1, 1.0),
    SamplingConfig(True, 1.0, 5000, 1.0),  # top-k larger than the vocabulary
    SamplingConfig(True, 1.0, 0, 0.5),  # top-p cutting inside a tie
    SamplingConfig(True, 1.0, 0, 0.34),
    SamplingConfig(True, 2.0, 4, 0.3),
    SamplingConfig(True, 1.0, 0, 1e-6),  # keeps only the most likely id (at least one is kept)
]


@pytest.mark.parametrize("cfg", WARPS, ids=lambda c: f"t{c.temperature}-k{c.top_k}-p{c.top_p}")
@pytest.mark.parametrize("name,logits", all_logits(), ids=[n for n, _ in all_logits()])
def test_warp_equals_hf(name, logits, cfg):
    assert_same_logits(warp(logits, cfg), hf_warp(logits, cfg))


def test_top_p_inside_a_tie_cuts_like_hf():
    """probs of 0.25 / 0.25 / 0.25 / 0.125 / 0.125: top-p 0.5 keeps exactly the ids HF keeps, even when the
    boundary falls between tied ids (the cut depends on the sort order, which must be HF's)."""
    logits = torch.log(torch.tensor([[0.125, 0.25, 0.25, 0.125, 0.25]]))
    for top_p in (0.5, 0.6, 0.75, 0.8):
        cfg = SamplingConfig(True, 1.0, 0, top_p)
        got, want = warp(logits, cfg), hf_warp(logits, cfg)
        assert_same_logits(got, want)
        assert torch.isfinite(got).sum() >= 1


TOP_K_THEN_P = [c for c in WARPS if c.top_k and c.top_p < 1.0]


@pytest.mark.parametrize("cfg", TOP_K_THEN_P, ids=lambda c: f"t{c.temperature}-k{c.top_k}-p{c.top_p}")
def test_top_p_over_the_top_k_cuts_where_hf_cuts(cfg):
    """The compiled frames' top-p (over the k survivors, no vocabulary-wide sort) keeps exactly HF's ids and
    logits on 2048 rows of a 2048-id vocabulary (no exact ties: where it may differ, see its docstring);
    with suppressed ids and fewer finite ids than k too."""
    logits = random_logits(2048, 2048, seed=5)
    logits[::7, 1900:] = -INF  # suppressed ids, as the talker's codec mask
    logits[3, 5:] = -INF  # fewer finite ids than top-k
    scaled = logits / cfg.temperature if cfg.temperature != 1.0 else logits  # warp's first step
    assert_same_logits(top_p_of_top_k(scaled, cfg), hf_warp(logits, cfg))


@contextlib.contextmanager
def counting_top_p_of_top_k():
    """The calls `warp` makes to `top_p_of_top_k` while the block runs (a list, one entry per call)."""
    import omni_core.models.sampling as sampling
    calls, original = [], sampling.top_p_of_top_k
    sampling.top_p_of_top_k = lambda *a: calls.append(1) or original(*a)
    try:
        yield calls
    finally:
        sampling.top_p_of_top_k = original


@pytest.mark.parametrize("how", ["compiled", "default mode"])
def test_warp_takes_the_top_k_form_compiled_and_in_the_default_mode(how):
    """Under torch.compile (as the predictor frames are traced) and where the config asks for it (the default
    mode's), `warp` takes `top_p_of_top_k`, with HF's cut; otherwise (exact mode) HF's sort."""
    cfg = SamplingConfig(True, 1.0, 50, 0.8)  # the code predictor's
    logits = random_logits(64, 2048, seed=6)
    if how == "compiled":
        fn = torch.compile(warp, backend="eager", fullgraph=True)
    else:
        fn, cfg = warp, dataclasses.replace(cfg, top_p_of_top_k=True)
        with counting_top_p_of_top_k() as calls:
            warp(logits, SamplingConfig(True, 1.0, 50, 0.8))
        assert not calls
    with counting_top_p_of_top_k() as calls:
        got = fn(logits, cfg)
    assert calls
    assert_same_logits(got, hf_warp(logits, cfg))


@pytest.mark.parametrize("exact", [False, True])
def test_a_sampled_request_takes_the_top_k_form_in_the_default_mode_only(exact):
    """The pipeline's modes: the default mode's predictor (and talker, when a request sets top-p) cut top-p over
    the top-k survivors; exact mode sorts as HF (its codes are the official ones: test_pipeline.py)."""
    pipe = our_pipeline("tiny", exact=exact)
    request = SpeechRequest("Hi.", mode="speak", do_sample=True, seed=2, top_p=0.9, max_frames=2)
    with counting_top_p_of_top_k() as calls:
        pipe.generate(request)
    if exact:
        assert not calls
    else:  # the predictor's 15 codebooks and the talker's CB0, each frame
        assert len(calls) >= 2 * 16


def test_warp_leaves_the_callers_logits_alone():
    logits = random_logits(2)
    before = logits.clone()
    warp(logits, SamplingConfig(True, 0.5, 3, 0.5))
    assert torch.equal(logits, before)


def test_full_talker_processing_equals_hf_chain():
    """penalty → suppression → temperature → top-k → top-p, as `generate` runs them for the talker."""
    V, eos = 3072, 2150
    ids = [i for i in range(V - 1024, V) if i != eos]
    mask = torch.zeros(V, dtype=torch.bool)
    mask[ids] = True
    logits, history = random_logits(1, V, seed=5), torch.tensor([[17, 17, 2150, 300, 5]])
    cfg = SamplingConfig(True, 0.9, 50, 0.95)
    hf = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.05), SuppressTokensLogitsProcessor(ids),
                              TemperatureLogitsWarper(0.9), TopKLogitsWarper(50), TopPLogitsWarper(0.95)])
    ours = warp(suppress(repetition_penalty(logits, history, 1.05), mask), cfg)
    assert_same_logits(ours, hf(history, logits.clone()))


# ---- choose: greedy and the exponential race -----------------------------------------------------------------

def test_greedy_picks_hfs_argmax_and_reports_its_probability():
    for _, logits in all_logits():
        ids, probs = choose(logits, SamplingConfig())
        assert torch.equal(ids, torch.argmax(logits, dim=-1))  # HF greedy: argmax, first index on ties
        torch.testing.assert_close(probs, logits.softmax(-1).gather(1, ids[:, None])[:, 0])


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's chi-square test of observed counts against probabilities (all > 0): the p-value,
    from the regularised upper incomplete gamma function (df = categories - 1)."""
    expected = probs.double() * counts.sum()
    stat = ((counts.double() - expected) ** 2 / expected).sum()
    df = len(counts) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), stat / 2))


def race_counts(logits: torch.Tensor, cfg: SamplingConfig, draws: int, seed: int,
                noise: torch.Tensor | None = None) -> torch.Tensor:
    """How often `choose` picks each id in `draws` independent draws (rows) from the same logits [1, V]."""
    generator = torch.Generator().manual_seed(seed)
    ids, _ = choose(logits.expand(draws, -1), cfg, generator, noise)
    return torch.bincount(ids, minlength=logits.shape[-1])


DRAWS = 200_000
SAMPLED = [
    ("talker_defaults", random_logits(1, 40, seed=2), SamplingConfig(True, 0.9, 8, 1.0)),
    ("predictor_top_p", random_logits(1, 40, seed=3), SamplingConfig(True, 1.0, 50, 0.8)),
    ("ties_and_neg_inf", adversarial_logits()["neg_inf"], SamplingConfig(True, 1.5, 0, 1.0)),
    ("top_p_in_a_tie", adversarial_logits()["ties"], SamplingConfig(True, 1.0, 0, 0.6)),
]


@pytest.mark.parametrize("name,logits,cfg", SAMPLED, ids=[s[0] for s in SAMPLED])
def test_exponential_race_draws_the_processed_distribution(name, logits, cfg):
    target = warp(logits, cfg).softmax(-1)[0]  # what HF's multinomial draws from
    torch.testing.assert_close(target, hf_warp(logits, cfg).softmax(-1)[0], rtol=0, atol=0)
    counts = race_counts(logits, cfg, DRAWS, seed=1234)
    kept = target > 0
    assert counts[~kept].sum() == 0, "drew an id the warpers removed"
    assert chi_square_p_value(counts[kept], target[kept]) > 1e-3
    ids, probs = choose(logits.expand(8, -1), cfg, torch.Generator().manual_seed(0))
    torch.testing.assert_close(probs, target[ids])  # the reported probability is the processed one


def test_chi_square_rejects_a_wrong_sampler():
    """The same test has the power to fail: uniform instead of Exp(1) noise in the race, or drawing
    from the distribution before top-k / temperature, is rejected with these draws."""
    logits, cfg = SAMPLED[0][1], SAMPLED[0][2]
    target = warp(logits, cfg).softmax(-1)[0]
    kept = target > 0
    uniform = torch.rand(DRAWS, logits.shape[-1], generator=torch.Generator().manual_seed(9))
    wrong_noise = race_counts(logits, cfg, DRAWS, seed=1234, noise=uniform)
    assert chi_square_p_value(wrong_noise[kept], target[kept]) < 1e-6
    no_temperature = race_counts(logits, SamplingConfig(True, 1.0, cfg.top_k, 1.0), DRAWS, seed=1234)
    assert chi_square_p_value(no_temperature[kept], target[kept]) < 1e-6
    no_top_k = race_counts(logits, SamplingConfig(True, cfg.temperature, 0, 1.0), DRAWS, seed=1234)
    assert no_top_k[~kept].sum() > 0


def test_sampling_is_seeded():
    logits, cfg = random_logits(3, 50), SamplingConfig(True, 0.9, 10, 0.9)
    a = choose(logits, cfg, torch.Generator().manual_seed(7))[0]
    b = choose(logits, cfg, torch.Generator().manual_seed(7))[0]
    assert torch.equal(a, b)
