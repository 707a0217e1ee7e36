"""`Predictors` (omni_core/fast/predictors.py): one call for every row, the eager path on CPU (no
graph), greedy rows equal the eager greedy predictor, a sampled row gets what it gets alone."""

from __future__ import annotations

import torch

from omni_core.fast.predictors import Predictors
from omni_core.models.code_predictor import GREEDY, predict_kv, predict_reprefill

from .conftest import our_pipeline


def inputs(batch: int = 3):
    pipe = our_pipeline("tiny")
    g = torch.Generator().manual_seed(0)
    h = torch.randn(batch, pipe.config.predictor.hidden_size, generator=g)
    e0 = pipe.talker.model.codec_embedding(torch.randint(0, 2048, (batch,), generator=g))
    return Predictors(pipe.talker.code_predictor, torch.device("cpu")), h, e0


@torch.no_grad()
def test_greedy_rows_equal_the_eager_predictors_and_count_one_call():
    preds, h, e0 = inputs()
    assert preds.compiled is None and not preds.uses_graph("reprefill", None) and not preds.uses_graph("kv", True)
    for kind, eager in (("reprefill", predict_reprefill), ("kv", predict_kv)):
        codes, probs, embeds, top, top_probs = preds.run(kind, h, e0, [None] * 3)
        want = eager(preds.cp, h, e0, GREEDY, alternatives=5)
        assert codes.shape == (3, 15) and embeds.shape == (3, 15, h.shape[1]) and top.shape == (3, 15, 5)
        torch.testing.assert_close(codes, want[0])
        torch.testing.assert_close(top, want[3])
    assert preds.calls == 2


@torch.no_grad()
def test_a_sampled_row_gets_what_it_gets_alone_beside_greedy_rows():
    preds, h, e0 = inputs()
    gens = lambda: [None, torch.Generator().manual_seed(5), None]  # noqa: E731
    mixed = preds.run("reprefill", h, e0, gens())
    alone = preds.run("reprefill", h[1:2], e0[1:2], [torch.Generator().manual_seed(5)])
    greedy = preds.run("reprefill", h, e0, [None] * 3)
    torch.testing.assert_close(mixed[0][1:2], alone[0])
    torch.testing.assert_close(mixed[0][[0, 2]], greedy[0][[0, 2]])
    assert not torch.equal(alone[0], greedy[0][1:2])  # sampling does change the codes
    torch.testing.assert_close(preds.run("reprefill", h, e0, gens())[0], mixed[0])  # seeded


def test_graph_only_for_reprefill_on_cuda_unless_opted_out():
    pipe = our_pipeline("tiny")
    cuda = Predictors(pipe.talker.code_predictor, torch.device("cuda"))  # nothing is built until used
    assert cuda.uses_graph("reprefill", None) and cuda.uses_graph("reprefill", True)
    assert not cuda.uses_graph("reprefill", False) and not cuda.uses_graph("kv", None)


@torch.no_grad()
def test_rows_of_both_kinds_get_what_their_kinds_own_calls_give_them():
    """`run_rows`: one pass for both kinds (one call), or in exact mode a call per kind; either way each row
    gets, bit for bit, what its kind's own call gives it (greedy and sampled rows mixed)."""
    preds, h, e0 = inputs(4)
    kinds = ["kv", "reprefill", "kv", "reprefill"]
    gens = lambda: [None, torch.Generator().manual_seed(5), torch.Generator().manual_seed(6), None]  # noqa: E731
    for exact in (False, True):
        preds.exact, before = exact, preds.calls
        got = preds.run_rows(kinds, [False] * 4, h, e0, gens())
        assert preds.calls - before == (2 if exact else 1)
        for kind in ("kv", "reprefill"):
            rows, g = [b for b, k in enumerate(kinds) if k == kind], gens()
            want = preds.run(kind, h[rows], e0[rows], [g[b] for b in rows])
            assert all(torch.equal(x[rows], y) for x, y in zip(got, want))
