"""The planner's probes share one weight's random rows and repeated calls (omni_core/planner/probe.py, `Calls`):
each shared call is the very call `invariant.linear` makes, the answers are those of probes that share nothing,
and a plan's probe makes no 1-row call twice."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from omni_core.models import onednn
from omni_core.models.invariant import ONEDNN, PLAIN, ROWWISE, SAFE, Kernel, Plan, linear
from omni_core.planner import probe
from omni_core.planner.choose import NO_PACKING, choose

# Plans of every kind a probe checks: padded, cut, one-thread, one call, no GEMM.
PLANS = [Plan(1, 32), Plan(2, 32), Plan(4, 16), Plan(3, 5), SAFE, PLAIN, Plan(2, 64, Kernel.SERIAL), ROWWISE]


def weight(K: int, N: int, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(N, K, generator=torch.Generator().manual_seed(K * N)) / K ** 0.5).to(dtype)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a one-thread plan's calls then switch threads, and kept calls are kept per count
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_shared_call_is_the_call_linear_makes(dtype, two_threads):
    """Calls.linear(plan, start, n) equals invariant.linear(X[start:start + n]) bit for bit, for every kind of
    plan, from row 0 and elsewhere, kept or not, asked first or again."""
    w = weight(256, 320, dtype)
    bias = torch.randn(320).to(dtype)
    calls = probe.Calls(w, bias)
    plans = PLANS + ([ONEDNN] if onednn.usable(w) else [])
    for plan in plans:
        packed = onednn.pack(w) if plan.kernel is Kernel.ONEDNN else None
        for start, n in [(0, 1), (5, 1), (0, 2), (0, 7), (0, 32), (3, 7), (0, 40), (3, 40), (9, 64)]:
            want = linear(calls.X[start:start + n].clone(), w, bias, plan, packed)
            for _ in range(2):  # the kept result, the second time
                assert torch.equal(calls.linear(plan, start, n, packed), want), (plan, start, n)


def test_rows_are_drawn_once_for_every_probe():
    """One weight's probes read one X: enough rows for `widened`'s 64-row calls at offset 3, and for a
    half-precision weight its PROBE_OUTPUTS outputs; the first rows are those of a smaller draw (same seed)."""
    for w, rows in [(weight(64, 192, torch.float32), probe.WIDE_ROWS + 3),
                    (weight(64, 192, torch.bfloat16), probe.PROBE_OUTPUTS // 192)]:
        X = probe.Calls(w).X
        assert X.shape == (rows, 64) and X.dtype == w.dtype
        small = torch.randn(35, 64, generator=torch.Generator().manual_seed(0)).to(w.dtype)
        assert torch.equal(X[:35], small)


# (64, 20000): a half-precision weight checked on 52 rows of the 67 drawn; (256, 4096): on 256 rows.
@pytest.mark.parametrize("shape, dtype", [((64, 192), torch.float32), ((1024, 768), torch.float32),
                                          ((64, 20000), torch.bfloat16), ((256, 4096), torch.bfloat16)])
def test_shared_probes_answer_as_probes_that_share_nothing(shape, dtype, two_threads):
    """runs, holds and widened with one Calls give what each gives with rows of its own."""
    w = weight(*shape, dtype)
    calls = probe.Calls(w)
    found = probe.runs(w, calls=calls)
    assert found == probe.runs(w)
    beyond = range(probe.PROBE_ROWS + 1, probe.WIDE_ROWS + 1)
    for plan in probe.candidates(found)[:2] + [Plan(4, 16), Plan(2, 64, Kernel.SERIAL)]:
        assert probe.holds(plan, w, calls=calls) == probe.holds(plan, w), plan
    wide = probe.candidates(found)[0]._replace(chunk=probe.WIDE_ROWS)
    assert probe.holds(wide, w, counts=beyond, calls=calls) == probe.holds(wide, w, counts=beyond), wide
    assert probe.first_holding(w, None, calls) == probe.first_holding(w, None)


def test_choosing_a_plan_makes_no_one_row_call_twice(monkeypatch, two_threads):
    """While `choose` probes a weight (runs, each candidate's holds, the one-thread plan, widened), every 1-row
    call of the weight's rows, and every call of 1..PROBE_ROWS rows from row 0, is made once per thread count
    (a padded call copies its row first, so only unpadded calls are counted here)."""
    w = weight(1024, 768, torch.bfloat16)
    made, real = [], F.linear
    rows = {}

    def counted(x, *args):
        if x.untyped_storage().data_ptr() == rows.get("X"):
            made.append((torch.get_num_threads(), x.data_ptr(), x.shape[0]))
        return real(x, *args)

    real_init = probe.Calls.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        rows["X"] = self.X.untyped_storage().data_ptr()

    monkeypatch.setattr(probe.Calls, "__init__", init)
    monkeypatch.setattr(F, "linear", counted)
    plan = choose(w, None, {}, NO_PACKING)
    repeated = [c for c in made if (c[2] == 1 or c[1] == rows["X"]) and c[2] <= probe.PROBE_ROWS]
    assert plan != ROWWISE and repeated and len(repeated) == len(set(repeated))
    solos = {c for c in made if c[2] == 1}
    assert len(solos) >= probe.PROBE_OUTPUTS // 768  # every row of a half-precision weight's check, once
