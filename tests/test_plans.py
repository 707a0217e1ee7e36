"""The matmul plans kept per machine (planner/store.py): a second load probes nothing and gets the
same plans; a damaged file or another machine's key means probing again."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from omni_core.models import invariant
from omni_core.planner import choose, probe
from omni_core.planner import store as plans
from tests.conftest import our_pipeline

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def loaded():
    """The tiny pipeline's talker as loaded (before `cache` points the cache folder elsewhere)."""
    return our_pipeline("tiny").talker


@pytest.fixture
def cache(loaded, tmp_path, monkeypatch):
    monkeypatch.setattr(plans, "cache_dir", lambda: tmp_path)
    return tmp_path


@pytest.fixture
def probes(monkeypatch):
    """How many shapes choose.choose probed (each probe calls `runs` once)."""
    count = [0]
    real = probe.runs

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(probe, "runs", counted)
    return count


def talker_plans(talker) -> dict[str, tuple]:
    return {name: m.plan for name, m in talker.named_modules() if isinstance(m, invariant.Linear)}


def test_a_second_load_reads_the_plans_instead_of_probing(loaded, cache, probes):
    talker = copy.deepcopy(loaded)
    want = talker_plans(talker)  # chosen when the pipeline loaded
    for m in talker.modules():  # forget them
        if isinstance(m, invariant.Linear):
            m.plan = invariant.SAFE
    probed = plans.plan_modules([talker], CPU)
    shapes = probes[0]
    assert shapes > 3 and len(probed) == shapes  # every distinct shape probed once, all kept
    assert talker_plans(talker) == want
    assert plans.path(CPU).exists() and plans.read(CPU) == probed

    again = copy.deepcopy(talker)
    for m in again.modules():
        if isinstance(m, invariant.Linear):
            m.plan = invariant.SAFE
    assert plans.plan_modules([again], CPU) == {} and probes[0] == shapes  # nothing probed the second time
    assert talker_plans(again) == want


def test_a_damaged_file_is_probed_again_and_rewritten(loaded, cache, probes):
    plans.path(CPU).parent.mkdir(parents=True)
    plans.path(CPU).write_text('{"64x64 float32 cpu bias=False": [2, ')  # cut short
    talker = copy.deepcopy(loaded)
    assert plans.read(CPU) == {}
    probed = plans.plan_modules([talker], CPU)
    assert probes[0] > 0 and plans.read(CPU) == probed



def test_a_load_waits_for_another_process_probing_and_takes_its_plans(loaded, cache, probes):
    """Plans are chosen partly by timing: a load that starts while another process probes the same shapes
    waits for it and takes what it chose (the first answer stays), instead of probing beside it and
    choosing otherwise. The other process is this test holding the plan file's lock, writing a plan of its
    own for every shape, then letting go."""
    import threading
    import time

    from omni_core.cache import locked

    keys = plans.plan_modules([copy.deepcopy(loaded)], CPU).keys()  # every shape's key, probed in this folder
    plans.path(CPU).unlink()  # and forgotten: the load below starts from an empty folder
    probes[0] = 0
    talker = copy.deepcopy(loaded)
    theirs = invariant.Plan(16, 32)  # not what probing picks for every shape here
    assert any(plan != theirs for plan in talker_plans(talker).values())
    got = {}
    with locked(plans.path(CPU)):
        loading = threading.Thread(target=lambda: got.update(probed=plans.plan_modules([talker], CPU)))
        loading.start()
        time.sleep(0.5)  # without the lock, the load would have read the empty file and be probing by now
        plans.write(CPU, dict.fromkeys(keys, theirs))
    loading.join()
    assert got["probed"] == {} and probes[0] == 0
    assert set(talker_plans(talker).values()) == {theirs}


def test_a_load_whose_shapes_are_all_known_does_not_wait_for_a_probing_process(loaded, cache, probes):
    """Another process probing (this test holding the plan file's lock) keeps a load waiting only when the load
    has shapes to probe: one whose every shape is in the file reads its plans and goes on."""
    import threading

    from omni_core.cache import locked

    first = copy.deepcopy(loaded)
    plans.plan_modules([first], CPU)  # every shape probed into this folder's file
    probes[0] = 0
    talker = copy.deepcopy(loaded)
    for m in talker.modules():  # forget them
        if isinstance(m, invariant.Linear):
            m.set_plan(invariant.PLAIN)
    got = {}
    with locked(plans.path(CPU)):
        loading = threading.Thread(target=lambda: got.update(probed=plans.plan_modules([talker], CPU)))
        loading.start()
        loading.join(timeout=60)
        waited = loading.is_alive()
    loading.join()
    assert not waited, "a load with nothing to probe waited for the lock"
    assert got["probed"] == {} and probes[0] == 0
    assert talker_plans(talker) == talker_plans(first)


def test_the_file_is_the_machines_own(cache):
    """Another thread count (or CPU, or torch build) is another machine: its own file."""
    first = plans.path(CPU)
    before = torch.get_num_threads()
    torch.set_num_threads(1 if before != 1 else 2)
    try:
        assert plans.path(CPU) != first
    finally:
        torch.set_num_threads(before)
    assert plans.path(CPU) == first


@pytest.mark.parametrize("name,value", [
    ("MKL_CBWR", "COMPATIBLE"),  # MKL's conditional reproducibility: other kernels
    # OpenMP's waiting threads sleep or spin: which plan times faster for a small weight (omni_core/cache.py)
    ("OMP_WAIT_POLICY", "ACTIVE" if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" else "PASSIVE"),
])
def test_a_kernel_library_setting_is_another_machine(cache, monkeypatch, name, value):
    first = plans.path(CPU)
    monkeypatch.setenv(name, value)
    assert plans.path(CPU) != first


def test_names_round_trip():
    key = ((2048, 1024), torch.bfloat16, "cpu", False, choose.NO_PACKING)
    assert plans._name(key) == "2048x1024 bfloat16 cpu bias=False kernels=aten+serial"
    assert plans._key(plans._name(key)) == key


def test_a_onednn_plan_is_kept_and_read_back(cache):
    key = ((3072, 1024), torch.float32, "cpu", False, choose.ALL_KERNELS)
    plans.write(CPU, {key: invariant.ONEDNN})
    assert plans.read(CPU) == {key: invariant.ONEDNN}


def test_a_file_in_the_kept_format_reads_back_typed(cache):
    """The file's text is the one earlier loads wrote (the same rule, so the same file): each line's kernels
    and plan kernel read back as Kernel members, and are written back to the same text."""
    text = '{\n"64x192 float32 cpu bias=True kernels=aten+serial+onednn": [\n2,\n15,\n"serial"\n]\n}'
    plans.path(CPU).parent.mkdir(parents=True)
    plans.path(CPU).write_text(text)
    key = ((192, 64), torch.float32, "cpu", True, choose.ALL_KERNELS)
    want = {((64, 192), torch.float32, "cpu", True, choose.ALL_KERNELS): invariant.Plan(2, 15, invariant.Kernel.SERIAL)}
    assert plans.read(CPU) == want
    plans.write(CPU, {})
    assert plans.path(CPU).read_text() == text
    plans.write(CPU, {key: invariant.ONEDNN})
    assert plans.read(CPU) == {**want, key: invariant.ONEDNN}


def test_a_plain_load_probes_nothing_and_keeps_nothing(cache, probes):
    """exact=True and batch_invariant=False run every matmul as PLAIN: nothing is probed at load, nothing
    is written; a batch-invariant load of the same model into the same (empty) cache does probe."""
    from omni_core import load_pipeline
    from omni_core.loading.recipe import load_model

    for options in ({"exact": True}, {"batch_invariant": False}):
        with load_pipeline("tiny", device="cpu", **options) as pipe:
            matmuls = [m for root in (pipe.thinker, pipe.talker) for m in root.modules()
                       if isinstance(m, invariant.Linear) or hasattr(m, "plan_weights")]
            assert matmuls and all(m.plans == [invariant.PLAIN] * len(m.plan_weights()) if hasattr(m, "plan_weights")
                                   else m.plan == invariant.PLAIN for m in matmuls)
    assert probes[0] == 0 and not plans.path(CPU).exists()
    load_model("tiny", device="cpu")
    assert probes[0] > 0 and plans.path(CPU).exists()


def test_no_onednn_plans_where_their_packed_copies_would_not_fit(monkeypatch):
    """oneDNN plans keep a packed copy beside each weight they take: offered only where it fits."""
    from omni_core.loading import memory

    big = invariant.Linear(1024, 3072, bias=False)  # 12 MB of float32
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2**30)
    assert plans.room_to_pack([big], CPU)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 16 * 2**20)  # 12 MB + half of it does not fit
    assert not plans.room_to_pack([big], CPU)


def test_bfloat16_weights_count_where_onednn_may_pack_them(monkeypatch):
    """A large bfloat16 weight may take oneDNN where oneDNN has bfloat16 kernels (plan rule 14): its packed copy
    counts in the room check there, and nowhere else."""
    from omni_core.loading import memory
    from omni_core.models import onednn

    big = invariant.Linear(1024, 3072, bias=False).to(torch.bfloat16)  # 6 MB
    monkeypatch.setattr(memory, "free_bytes", lambda device: 8 * 2**20)  # 6 MB + half of it does not fit
    assert plans.room_to_pack([big], CPU) == (not onednn.usable(big.weight))
