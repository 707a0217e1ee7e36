"""packages.py and units.py: what a compiled unit's name depends on, that a unit computes with the weights it is
given, is read back by a second one, and that a failed build leaves nothing behind. (The engine's units:
test_compiled.py.)"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from omni_core.fast import packages
from omni_core.fast.units import Unit
from omni_core.models.invariant import Linear, Plan


def small() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(Linear(8, 16), torch.nn.SiLU(), Linear(16, 4))


def name(module: torch.nn.Module, **what) -> str:
    return packages.key(dict(dict(fn="kv", rows=4, dtype=torch.float32, device="cpu"), **what),
                        packages.module_digest(module))


def test_the_name_is_stable_and_readable():
    module = small()
    assert name(module) == name(copy.deepcopy(module))
    assert name(module).startswith("kv-4-float32-cpu-") and name(module).endswith(".unit")


def test_strides_plans_and_shapes_each_change_the_name_and_the_weights_do_not():
    """What compiled code depends on names it; the weights' values do not (they are a unit's inputs)."""
    base, names = small(), set()
    names.add(name(base))
    other = copy.deepcopy(base)
    with torch.no_grad():
        other[0].weight[0, 0] += 1e-6  # one bit of one weight
    assert name(other) == name(base)
    layout = copy.deepcopy(base)
    layout[0].weight.data = layout[0].weight.data.t().contiguous().t()  # same values, K-major
    names.add(name(layout))
    planned = copy.deepcopy(base)
    planned[2].plan = Plan(2, 15)
    names.add(name(planned))
    names.add(name(base, rows=16))
    names.add(name(base, dtype=torch.bfloat16))
    assert len(names) == 5


def test_the_kernel_threads_change_the_name():
    module, threads = small(), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = name(module)
        torch.set_num_threads(2)
        assert name(module) != one
    finally:
        torch.set_num_threads(threads)


def test_another_machine_gets_another_name(monkeypatch):
    """The C++ is built for this CPU (-march=native): a cache folder shared with another machine
    must not hand it this machine's packages."""
    from omni_core import cache

    module = small()
    here = name(module)
    monkeypatch.setattr(cache, "_cpu", lambda: "vendor_id=OtherVendor\nflags=sse2")
    assert name(module) != here


def apply(module, x):
    """A unit's function: a module passed in (its weights become the graph's inputs) and a symbolic batch."""
    return module(x).relu()


def test_a_failed_build_leaves_no_unit(tmp_path):
    def broken(x):
        raise ValueError("no graph here")

    unit = Unit(broken, tmp_path / "broken.unit", "a broken unit", globals())
    with pytest.raises(Exception, match="no graph here"):  # dynamo wraps it
        unit.ensure([(torch.ones(3),)])
    assert list(tmp_path.glob("*.unit")) == [] and unit.variants == []


def test_files_unused_for_a_month_are_pruned(tmp_path):
    old, recent = tmp_path / "kv-4-float32-cpu-old.unit", tmp_path / "kv-4-float32-cpu-new.unit"
    for path in (old, recent):
        path.write_bytes(b"unit")
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    other = tmp_path / "notes.txt"  # not ours: left alone
    other.write_text("keep")
    os.utime(other, (month_ago, month_ago))
    assert packages.prune(tmp_path) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv-4-float32-cpu-new.unit", "notes.txt"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A real unit (`apply`, built in seconds) for batches of 2 rows and more, and two modules of the same
    shapes with other weights: (unit, first, second)."""
    first = small().eval()
    second = copy.deepcopy(first)
    with torch.no_grad():
        second[2].weight.neg_()
    unit = Unit(apply, tmp_path_factory.mktemp("units") / name(first), "a small unit", globals())
    with torch.no_grad():
        unit.ensure([(first, torch.ones(3, 8)), (first, torch.ones(5, 8))])
    return unit, first, second


def test_a_unit_computes_with_the_weights_it_is_given(built):
    """Weights are inputs of a unit's code, never constants: one compiled unit serves both modules, and each
    call computes what its own module computes, for every batch size its variant holds."""
    unit, first, second = built
    assert unit.built == len(unit.variants) == 1  # 3 and 5 rows: one symbolic batch
    with torch.no_grad():
        for rows in (2, 4, 7):
            x = torch.randn(rows, 8)
            got = [unit(module, x) for module in (first, second)]
            for g, module in zip(got, (first, second)):
                torch.testing.assert_close(g, apply(module, x))
            assert not torch.allclose(got[0], got[1], atol=1e-2)
    assert unit.built == 1  # nothing compiled for those calls


def test_a_second_unit_reads_the_first_ones_file_and_marks_it_used(built):
    """A later process's unit reads the variants from the file (no compile), and reading refreshes the file's
    time, so prune keeps it."""
    unit, first, _ = built
    other = unit.path.with_name("kv-4-float32-cpu-other.unit")
    other.write_bytes(b"unit")
    month_ago = time.time() - 31 * 86400
    for p in (unit.path, other):
        os.utime(p, (month_ago, month_ago))
    again = Unit(apply, unit.path, "a small unit", globals())
    x = torch.randn(6, 8)
    with torch.no_grad():
        again.ensure([(first, x)])
        torch.testing.assert_close(again(first, x), apply(first, x))
    assert again.built == 0 and len(again.variants) == 1
    assert packages.prune(unit.path.parent) == [other] and unit.path.exists() and not other.exists()


HOLD = """
import sys, time
from pathlib import Path
from omni_core.fast import packages
path = Path(sys.argv[1])
with packages.building(path):
    print("building", flush=True)
    time.sleep(2)
    path.write_bytes(b"built")
"""


def test_a_second_process_waits_for_the_first_ones_build(tmp_path):
    """Two processes wanting one unit (two test workers, two starts at once): the second waits until the
    first has built it, then finds it (and loads it) instead of compiling it beside it."""
    path = tmp_path / "frame.unit"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "building"
        with packages.building(path):  # entered only once the first one is done
            assert path.read_bytes() == b"built"
        assert first.wait(timeout=60) == 0
    finally:
        first.kill()
        first.stdout.close()
    assert packages.prune(tmp_path, days=-1) == [path, tmp_path / ".frame.unit.lock"]  # its lock file goes too
