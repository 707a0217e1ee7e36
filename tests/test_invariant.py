"""Batch-invariant matmul rows (omni_core/models/invariant.py): with the plan chosen for its shape, a
row gets the same bits alone as in any batch at any position; the probe rejects plans that break it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from omni_core.models import onednn
from omni_core.models.invariant import ONEDNN, PLAIN, ROWWISE, SAFE, Kernel, Linear, Plan, linear, on_one_thread
from omni_core.planner import probe, timing
from omni_core.planner.choose import ATEN_ONLY, NO_PACKING, TIMED_BYTES, choose
from omni_core.planner.probe import MIN_RUN, PROBE_ROWS, WIDE_NUMEL, WIDE_ROWS, candidates, first_holding, holds, runs
from omni_core.planner.timing import fastest

from .conftest import our_pipeline

ROW = Plan(1, 1)  # every row its own 1-row call (a plan no weight is given now; it always holds)

# (K, N): tiny projections, a codec head, the real code predictor's FFN, a real talker's down projection
# (K = 6144: bfloat16's one-row kernel differs there), the real 1.7B talker's FFN.
SHAPES = [(64, 192), (32, 2048), (1024, 3072), (3072, 1024), (6144, 2048), (2048, 12288)]


def weights(K: int, N: int, dtype: torch.dtype, bias: bool = False):
    g = torch.Generator().manual_seed(K + N)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).to(dtype)
    return w, (torch.randn(N, generator=g).to(dtype) if bias else None), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_row_is_the_same_alone_and_in_any_batch_at_any_position(shape, dtype):
    K, N = shape
    weight, bias, g = weights(K, N, dtype, bias=K == 64)
    plan = choose(weight, bias, {})
    packed = onednn.pack(weight) if plan.kernel is Kernel.ONEDNN else None
    x = torch.randn(150, K, generator=g).to(dtype)
    alone = torch.cat([linear(x[i:i + 1], weight, bias, plan, packed) for i in range(len(x))])  # each row alone
    for rows in (2, 3, 4, 5, 8, 14, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 70, 129, 150):  # across both chunks
        together = linear(x[:rows], weight, bias, plan, packed)
        assert torch.equal(together, alone[:rows]), f"{plan}: {rows} rows differ from the same rows alone"
    for position in (1, 7, 20):  # the same vector among others, somewhere else in the batch
        moved = x.clone()
        moved[position] = x[0]
        assert torch.equal(linear(moved, weight, bias, plan, packed)[position], alone[0])


def every_row_as_alone(plan: Plan, weight: torch.Tensor, seed: int = 1, first: int = 2) -> bool:
    """Apart from `holds` (other data, plain F.linear): whether every row of every call of first..chunk rows
    (at least pad_min), at offsets 0 and 3, equals that row's own call padded to pad_min rows, bit for bit."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(plan.chunk + 3, weight.shape[1], generator=g).to(weight.dtype)
    solo = torch.cat([F.linear(F.pad(X[r:r + 1], (0, 0, 0, plan.pad_min - 1)), weight)[:1] for r in range(len(X))])
    return all(torch.equal(F.linear(X[o:o + M], weight), solo[o:o + M])
               for M in range(max(first, plan.pad_min), plan.chunk + 1) for o in (0, 3))


@pytest.mark.parametrize("dtype, shape, broken", [
    (torch.float32, (1024, 3072), Plan(1, 32)),  # no padding: a lone row takes the 1-row kernel
    (torch.float32, (1024, 3072), Plan(2, 32)),  # 16-32 rows take another kernel than 2-15
    (torch.bfloat16, (6144, 2048), Plan(1, 32)),  # at K = 6144 a lone bfloat16 row does too
])
def test_a_plan_that_breaks_invariance_is_rejected(dtype, shape, broken):
    """So removing the padding without a replacement cannot pass unnoticed; the safe rule holds.
    Which row counts share a kernel is the CPU's: where this one gives every row of the plan's calls its lone
    bits (bfloat16 at K = 6144 on an AMD EPYC), the plan is not broken here, and `holds` must say so. A Xeon
    with AMX runs that bfloat16 shape's rows 1-32 in one kernel by `runs` (which compares a call's first rows),
    and still rounds some later rows otherwise than alone: broken, and `holds` must see it."""
    weight, _, _ = weights(*shape, dtype)
    one_kernel = every_row_as_alone(broken, weight)
    assert holds(broken, weight) == one_kernel, runs(weight)
    if one_kernel:
        pytest.skip(f"this CPU runs {broken.pad_min}..{broken.chunk} rows of {tuple(shape)} {dtype} in one kernel")
    assert holds(SAFE, weight)


@pytest.mark.parametrize("dtype, shape, plan", [
    (torch.float32, (1024, 3072), Plan(1, WIDE_ROWS)),  # a lone row's kernel: broken where Plan(1, 32) is
    (torch.float32, (1024, 3072), Plan(4, WIDE_ROWS)),  # the float32 plan on an EPYC, widened
    (torch.bfloat16, (1024, 3072), Plan(2, WIDE_ROWS)),  # the bfloat16 plan there, widened
])
def test_calls_of_33_to_64_rows_are_checked_before_a_plan_is_widened(dtype, shape, plan):
    """`widened` takes chunk WIDE_ROWS only where `holds` finds every call of 33..64 rows equal to its rows
    alone; `holds` on those counts must agree with an independent check (other data, plain F.linear)."""
    weight, _, _ = weights(*shape, dtype)
    beyond = range(PROBE_ROWS + 1, WIDE_ROWS + 1)
    assert holds(plan, weight, counts=beyond) == every_row_as_alone(plan, weight, first=PROBE_ROWS + 1)
    narrow = plan._replace(chunk=PROBE_ROWS)
    if holds(narrow, weight):
        want = plan if holds(plan, weight, counts=beyond) else narrow
        assert probe.widened(narrow, weight, None) == want


def test_only_plans_of_the_full_run_and_weights_of_a_few_rows_a_call_are_widened():
    """A plan cut before 32 rows (its run ends there), a plan of another kernel than F.linear (oneDNN's weight is
    packed for 32 rows), and a weight over WIDE_NUMEL elements (a vocabulary head: a few rows a call) keep their
    chunk, unchecked. A one-thread plan (SERIAL) is checked on one thread, where its calls run."""
    weight, _, _ = weights(64, 192, torch.float32)
    for plan in (Plan(2, 15), ONEDNN, ROWWISE):
        assert probe.widened(plan, weight, None) is plan
    huge = torch.empty(WIDE_NUMEL // 64 + 1, 64, device="meta")  # never called: its size alone decides
    assert probe.widened(Plan(4, 32), huge, None) == Plan(4, 32)
    serial = on_one_thread(probe.first_holding, weight, None)._replace(kernel=Kernel.SERIAL)
    if serial.chunk == PROBE_ROWS:
        wide = serial._replace(chunk=WIDE_ROWS)
        beyond = range(PROBE_ROWS + 1, WIDE_ROWS + 1)
        assert probe.widened(serial, weight, None) == (wide if on_one_thread(holds, wide, weight, None, 0, None, beyond)
                                                       else serial)


def test_only_the_plan_kept_is_checked_on_33_to_64_rows(monkeypatch):
    """`choose` widens the plan it keeps, and no other: a large float32 weight whose oneDNN plan wins the timing
    is never checked on 33..64 rows, nor is the candidate it beat."""
    widened = []
    real = probe.widened
    monkeypatch.setattr(probe, "widened", lambda plan, *args: widened.append(plan) or real(plan, *args))
    monkeypatch.setattr(probe, "first_holding", lambda weight, bias, calls=None: Plan(2, 32))
    monkeypatch.setattr(probe, "holds", lambda plan, *args, **kwargs: True)
    monkeypatch.setattr(timing, "timings", lambda plans, *args, **kwargs: {p: (1.0, 1.0) if p == ONEDNN
                                                                           else (2.0, 2.0) for p in plans})
    large, _, _ = weights(1024, 3072, torch.float32)
    if not onednn.usable(large):
        pytest.skip("no oneDNN packing on this build")
    assert choose(large, None, {}) == ONEDNN and widened == [ONEDNN]


def test_timings_read_each_weight_from_memory_over_a_sweep_of_copies():
    """`timing.timings` times a large weight as a model step reads its layers: over copies that together fill twice
    the last-level cache (one copy of a weight that large itself), each plan's 1-row and 8-row call per copy."""
    weight, _, _ = weights(1024, 1024, torch.float32)  # 4 MB
    size = weight.numel() * weight.element_size()
    n = timing._copies(weight)
    assert n * size >= timing.cache_bytes() > (n - 1) * size
    assert timing._copies(torch.empty(timing.cache_bytes() // 4 + 1)) == 1
    before = weight.clone()
    times = timing.timings([Plan(2, 32), SAFE], weight, repeats=1)
    assert set(times) == {Plan(2, 32), SAFE}
    assert all(0 < t < 1 for pair in times.values() for t in pair) and torch.equal(weight, before)


def test_a_gate_with_one_output_where_no_gemm_run_holds_sums_row_by_row():
    """The talker's 1-output shared-expert gate at the real width: its matrix-vector kernel depends on
    the row count, and the old pad-16 rule did not hold there either."""
    for K in (64, 1024):
        weight, _, _ = weights(K, 1, torch.float32)
        assert not holds(SAFE, weight) and holds(ROWWISE, weight)
        assert choose(weight, None, {}) == ROWWISE


def test_a_narrow_half_precision_weight_sums_row_by_row_unprobed(monkeypatch):
    """Under 64 outputs, 16,384 rows hold too few outputs to catch a plan's rare last bits (a 4x48 bfloat16
    weight's 1-64-row plan passed on some weights and failed 11 in 524,288 outputs on a Zen 4): such a weight is
    ROWWISE without a probe, which holds on the rows the check reads at any threads. 64 outputs are probed."""
    probed = []
    real_runs = probe.runs
    monkeypatch.setattr(probe, "runs", lambda *args, **kwargs: probed.append(1) or real_runs(*args, **kwargs))
    for K, N in ((48, 4), (1024, 1), (32, 63)):
        weight, _, _ = weights(K, N, torch.bfloat16)
        assert probe.too_narrow(weight) and choose(weight, None, {}) == ROWWISE and not probed
        for threads in (1, 2):
            assert on_one_thread(holds, ROWWISE, weight) if threads == 1 else holds(ROWWISE, weight)
    assert not probe.too_narrow(weights(48, 4, torch.float32)[0])  # float32 shows a kernel's bits in 35 rows
    wide, _, _ = weights(32, 64, torch.bfloat16)
    choose(wide, None, {})
    assert not probe.too_narrow(wide) and probed


def test_the_cheapest_plan_that_holds_is_chosen_per_shape_and_cached():
    chosen = {}
    w32, _, _ = weights(1024, 3072, torch.float32)
    plan = choose(w32, None, chosen)
    assert plan.pad_min < SAFE.pad_min  # a lone row no longer pays a 16-row GEMM
    assert holds(plan, w32)
    assert choose(w32.clone(), None, chosen) is plan and len(chosen) == 1  # one probe per shape


def test_a_long_run_of_row_counts_goes_before_a_short_one():
    """Kernel runs measured on the project's CPUs: the first plan tried pads a lone row least among the
    runs that can take a batch in few blocks."""
    assert candidates([(1, 1), (2, 15), (16, 32)])[0] == Plan(2, 15)  # Xeon float32
    assert candidates([(1, 1), (2, 2), (3, 32)])[0] == Plan(3, 32)  # Xeon float32, tiny widths
    assert candidates([(1, 1), (2, 3), (4, 32)])[0] == Plan(4, 32)  # EPYC float32: not blocks of 3
    # bfloat16: a run from 1 is also tried from 2 (a lone row's kernel may round the other rows otherwise)
    assert candidates([(1, 32)]) == [Plan(1, 32), Plan(2, 32), SAFE]
    assert candidates([(1, 1), (2, 3), (4, 5), (6, 32)]) == [Plan(6, 32), Plan(2, 3), Plan(4, 5), SAFE]
    assert candidates([(1, 1), (2, 3), (4, 5)]) == [Plan(2, 3), Plan(4, 5), SAFE]  # no long run: as before


def test_the_fastest_plan_puts_a_lone_row_first_then_batches():
    """Timings (ms, 1 row / 8 rows) measured on the project's CPUs for a 4096x1024 float32 weight."""
    epyc = {Plan(2, 3): (3.1, 8.1), ROW: (1.1, 9.1), ONEDNN: (0.44, 1.4)}  # 2 threads
    assert fastest(list(epyc), epyc) == ONEDNN
    no_onednn = {Plan(4, 32): (2.7, 5.2), ROW: (1.0, 8.0)}  # 1 thread, 4-row blocks: the lone row decides
    assert fastest(list(no_onednn), no_onednn) == ROW
    xeon = {Plan(2, 15): (1.05, 2.0), ROW: (1.0, 8.0)}  # padding a lone row to 2 costs ~5%: batches decide
    assert fastest(list(xeon), xeon) == Plan(2, 15)
    tie = {Plan(2, 15): (1.0, 2.0), ROW: (1.0, 2.0)}
    assert fastest(list(tie), tie) == Plan(2, 15)


@pytest.fixture
def timed(monkeypatch):
    """The plans `choose` timed, call by call; the fake timings make ONEDNN fastest, the rest alike."""
    calls = []

    def fake_timings(plans, weight, bias=None, **kwargs):
        calls.append(plans)
        return {p: (1.0, 1.0) if p == ONEDNN else (2.0, 2.0) for p in plans}

    monkeypatch.setattr(timing, "timings", fake_timings)
    return calls


def test_a_large_weight_is_timed_against_onednn_only(timed):
    """No call per row any more: a large float32 weight's run is timed against ONEDNN, which it takes where it is
    timed fastest (here, always) and holds."""
    large, _, _ = weights(1024, 3072, torch.float32)  # 12 MB
    onednn_holds = holds(ONEDNN, large)
    run = probe.widened(first_holding(large, None), large, None)
    assert choose(large, None, {}) == (ONEDNN if onednn_holds else run)
    assert all(p.kernel is not Kernel.SERIAL and p != ROW for p in sum(timed, []))
    assert timed and ONEDNN in timed[0]
    assert choose(large, None, {}, NO_PACKING) == run


def test_onednn_is_checked_only_where_it_is_timed_fastest(monkeypatch):
    """Its check is a large weight's costliest probe: made only where ONEDNN would be taken, and where it fails
    there the run (which holds) is taken."""
    large, _, _ = weights(1024, 3072, torch.float32)
    run, checked = probe.widened(first_holding(large, None), large, None), []
    real_holds = probe.holds

    def holds_watched(plan, *args, **kwargs):
        checked.append(plan)
        return False if plan == ONEDNN else real_holds(plan, *args, **kwargs)

    monkeypatch.setattr(probe, "holds", holds_watched)
    for onednn_fastest in (False, True):
        monkeypatch.setattr(timing, "timings", lambda plans, *args, fast=onednn_fastest, **kwargs: {
            p: (1.0, 1.0) if (p == ONEDNN) == fast else (2.0, 2.0) for p in plans})
        checked.clear()
        assert choose(large, None, {}) == run
        assert (ONEDNN in checked) == onednn_fastest


def test_a_large_weight_pads_a_lone_row_into_its_run(monkeypatch):
    """Where a lone row's kernel differs from the run's (first_holding pads it), every dtype takes the run (the
    default since issue 42; `exact=True` gives the official 1-row call's bits), whatever the timings."""
    monkeypatch.setattr(probe, "first_holding", lambda weight, bias, calls=None: Plan(2, 32))
    monkeypatch.setattr(timing, "timings", lambda plans, *args, **kwargs: {p: (1.0, 1.0) if p == Plan(2, 32)
                                                                           else (1.0, 8.0) for p in plans})
    for dtype in (torch.bfloat16, torch.float32):
        large, _, _ = weights(1024, 3072, dtype)
        assert choose(large, None, {}, NO_PACKING) == probe.widened(Plan(2, 32), large, None), dtype


def test_a_padded_lone_bfloat16_row_equals_its_rows_in_any_batch():
    """On the real kernels: a large bfloat16 weight (K = 2048: a lone row's kernel differs from 2..32 rows' on an
    AMD EPYC of family 26) takes its holding run, and a lone row, padded into it, equals its row in every batch."""
    weight, _, g = weights(2048, 1024, torch.bfloat16)
    assert weight.numel() * weight.element_size() >= TIMED_BYTES
    plan = choose(weight, None, {}, ATEN_ONLY)
    assert plan == probe.widened(first_holding(weight, None), weight, None) != ROW
    x = torch.randn(40, 2048, generator=g).to(torch.bfloat16)
    alone = torch.cat([linear(row[None], weight, None, plan) for row in x])
    for rows in (2, 3, 8, 15, 16, 17, 32, 33, 40):
        assert torch.equal(linear(x[:rows], weight, None, plan), alone[:rows]), rows


def test_a_small_weight_takes_its_one_thread_plan(timed):
    """On one thread the one-thread plan is the plan (nothing to time); on more, it is timed against the
    thread count's own plan. Compiled graphs (ATEN_ONLY) never take it."""
    small, _, _ = weights(64, 192, torch.float32)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        plan = choose(small, None, {})
        assert plan.kernel is Kernel.SERIAL and timed == []
        torch.set_num_threads(2)
        choose(small, None, {})
        assert timed and any(p.kernel is Kernel.SERIAL for p in timed[0]) and any(p.kernel is Kernel.ATEN for p in timed[0])
        assert choose(small, None, {}, ATEN_ONLY).kernel is Kernel.ATEN
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_one_thread_plan_holds_whatever_the_callers_threads(dtype):
    """Chosen at 1 thread, run at 2 (the engine's thread can have more than the loader's): every row of
    any batch equals its lone call, which equals F.linear on one thread; the caller's threads come back."""
    weight, bias, g = weights(64, 192, dtype, bias=True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        plan = choose(weight, bias, {})
        x = torch.randn(70, 64, generator=g).to(dtype)
        alone = torch.cat([F.linear(F.pad(row[None], (0, 0, 0, plan.pad_min - 1)), weight, bias)[:1] for row in x])
        torch.set_num_threads(2)
        for rows in (1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 70):
            assert torch.equal(linear(x[:rows], weight, bias, plan), alone[:rows]), rows
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1024, 3072), (3072, 1024), (64, 192)])
def test_onednn_gives_f_linears_values_and_where_it_holds_equal_rows(shape, dtype):
    K, N = shape
    weight, bias, g = weights(K, N, dtype, bias=True)
    if not onednn.usable(weight):
        pytest.skip(f"oneDNN has no {dtype} kernels on this CPU")
    packed = onednn.pack(weight)
    x = torch.randn(70, K, generator=g).to(dtype)
    got = linear(x, weight, bias, ONEDNN, packed)
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # bfloat16: its rounding of the outputs, ~1e-2 of |y| ~ 1
    torch.testing.assert_close(got, F.linear(x, weight, bias), rtol=tol, atol=tol)
    assert linear(x[:0], weight, bias, ONEDNN, packed).shape == (0, N)
    assert linear(x.view(7, 10, K), weight, bias, ONEDNN, packed).shape == (7, 10, N)
    if holds(ONEDNN, weight, bias):  # then in blocks of up to 32: any batch, any position
        alone = torch.cat([linear(x[i:i + 1], weight, bias, ONEDNN, packed) for i in range(len(x))])
        assert torch.equal(got, alone)
        strided = x.view(7, 10, K)[:, -1]  # rows 9, 19, ...: a last position, as the predictor's heads read it
        assert torch.equal(linear(strided, weight, bias, ONEDNN, packed), alone[9::10])


@pytest.mark.parametrize("plan", [Plan(2, 3), Plan(4, 32), SAFE, ROW, ONEDNN])
def test_a_row_is_the_same_however_the_batch_lies_in_memory(plan):
    """A stream's [1, T, C] view of a [1, C, T] tensor (a codec's transpose) against the same rows
    contiguous, and among other streams' rows (a reshape of [3, T, C] copies): the same bits. MKL
    rounded the transposed rows otherwise (found in the Qwen3-TTS codec's input projection, whose
    streams then decoded otherwise together than alone)."""
    weight, bias, g = weights(1024, 512, torch.float32, bias=True)
    packed = onednn.pack(weight) if plan.kernel is Kernel.ONEDNN else None
    invariant_here = holds(plan, weight, bias, packed=packed)  # else a batch may round a row otherwise anyway
    for T in (1, 2, 3, 8):
        view = torch.randn(1, 1024, T, generator=g).transpose(1, 2)  # [1, T, C], not contiguous
        want = linear(view.contiguous(), weight, bias, plan, packed)
        assert torch.equal(linear(view, weight, bias, plan, packed), want), T
        batch = torch.cat([torch.randn(1, T, 1024, generator=g), view, torch.randn(1, T, 1024, generator=g)])
        if invariant_here:
            assert torch.equal(linear(batch, weight, bias, plan, packed)[1:2], want), T
    if not invariant_here:
        pytest.skip(f"{plan} is not batch-invariant for this shape on this CPU: only the layout was checked")


def test_padding_keeps_shapes_and_the_values_of_f_linear():
    weight, bias = torch.randn(10, 64), torch.randn(10)
    plan = Plan(2, 15)
    for x in (torch.randn(1, 64), torch.randn(2, 3, 64), torch.randn(5, 17, 64)):  # padded; one block; split
        torch.testing.assert_close(linear(x, weight, bias, plan), F.linear(x, weight, bias))
        torch.testing.assert_close(linear(x, weight, bias, ROWWISE), F.linear(x, weight, bias))
    assert linear(torch.randn(0, 64), weight, plan=plan).shape == (0, 10)


def test_rowwise_in_half_precision_sums_float32_products_and_rounds_once():
    """As a GEMM accumulates: each output within an ulp of the float64 sum (products rounded to bfloat16
    before the sum moved a tiny MoE router's default-mode scores 0.5 from the official ones)."""
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.bfloat16, torch.float16):
        x, weight = torch.randn(64, 1024, generator=g).to(dtype), torch.randn(4, 1024, generator=g).to(dtype)
        bias = torch.randn(4, generator=g).to(dtype)
        want = F.linear(x.double(), weight.double(), bias.double())  # products and sums exact enough
        got = linear(x, weight, bias, ROWWISE)
        assert got.dtype == dtype and got.shape == (64, 4)
        ulp = torch.finfo(dtype).eps * want.abs().clamp_min(torch.finfo(dtype).tiny)
        assert ((got.double() - want).abs() <= ulp).all()  # an ulp of |want| is 2 half-ulps of its binade


def test_a_loaded_pipeline_has_a_plan_that_holds_for_every_matmul():
    pipe = our_pipeline("tiny")
    modules = (pipe.thinker, pipe.talker)
    linears = {tuple(m.weight.shape): m for root in modules for m in root.modules() if isinstance(m, Linear)}
    for m in linears.values():  # one per shape: the plan chosen at load holds
        assert holds(m.plan, m.weight, m.bias), (tuple(m.weight.shape), m.plan)
    # a batch of up to MIN_RUN rows in one block (where the CPU has such a run: both CPUs here do)
    assert all(m.plan.chunk - m.plan.pad_min + 1 >= MIN_RUN for m in linears.values() if m.plan != ROWWISE)
    assert all(m.plan != SAFE for m in linears.values())  # cheaper than the old rule everywhere; the tiny
    # shared-expert gate (N = 1), where no GEMM run holds (nor the old rule), sums its products row by row
    assert linears[(1, 64)].plan == ROWWISE
    experts = [m for root in modules for m in root.modules() if hasattr(m, "plan_weights")]
    assert experts and all(len(m.plans) == len(m.plan_weights()) for m in experts)
    for m in experts:
        assert all(holds(plan, w) for plan, w in zip(m.plans, m.plan_weights()))


def test_a_pipeline_without_batch_invariance_runs_plain_matmuls():
    """load_pipeline(batch_invariant=False): every matmul one plain F.linear (the option for people who
    never batch, or accept other codes beside others); the default keeps the chosen plans."""
    from omni_core import load_pipeline

    with load_pipeline("tiny", device="cpu", batch_invariant=False) as plain:
        linears = [m for m in plain.talker.modules() if isinstance(m, Linear)]
        assert {m.plan for m in linears} == {PLAIN} and plain.info["batch_invariant"] is False
    assert our_pipeline("tiny").info["batch_invariant"] is True


def test_an_exact_pipeline_runs_one_request_at_a_time_on_plain_matmuls():
    """load_pipeline(exact=True): every matmul one plain F.linear, as the official code calls it, and one request
    at a time (max_batch 1): the official bits for every request."""
    from omni_core import load_pipeline

    with load_pipeline("tiny", device="cpu", exact=True, max_batch=8) as pipe:
        linears = [m for root in (pipe.thinker, pipe.talker) for m in root.modules() if isinstance(m, Linear)]
        assert {m.plan for m in linears} == {PLAIN}
        experts = [m for m in pipe.talker.modules() if hasattr(m, "plan_weights")]
        assert experts and all(set(m.plans) == {PLAIN} for m in experts)
        assert pipe.info["exact"] is True and pipe.info["batch_invariant"] is False and pipe.info["max_batch"] == 1
    assert our_pipeline("tiny").info["exact"] is False


def test_a_large_bfloat16_pipeline_gives_each_request_its_solo_codes():
    """Qwen3-TTS 0.6B's real widths (one talker layer), bfloat16, default mode: no large bfloat16 matmul runs a
    call per row, and requests taken in together get their solo codes and audio."""
    from omni_core import SpeechRequest, load_pipeline
    from tests.test_engine import assert_same, collect

    requests = [SpeechRequest("Listener one hears this.", max_frames=4, predictor="kv"),
                SpeechRequest("And listener two.", max_frames=3),
                SpeechRequest("Three, sampled.", max_frames=4, do_sample=True, seed=5, predictor="kv")]
    with load_pipeline("random:qwen3-tts-0.6b?layers=1", device="cpu", dtype="bfloat16") as pipe:
        large = [m for m in pipe.talker.modules() if isinstance(m, Linear) and m.weight.numel() * 2 >= TIMED_BYTES]
        assert large and not any(m.plan[:2] == ROW[:2] for m in large)
        solo = [pipe.generate(r) for r in requests]
        together = [collect(s) for s in pipe.stream_together(requests)]
    for got, want in zip(together, solo):
        assert_same(got, want)
