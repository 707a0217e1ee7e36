"""packages.py: what a compiled package's name depends on, and that a failed build leaves nothing
behind. (Building and loading real packages: test_compiled.py.)"""

from __future__ import annotations

import copy
import os
import time

import pytest
import torch

from omni_core.fast import packages
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
    assert name(module).startswith("kv-4-float32-cpu-") and name(module).endswith(".pt2")


def test_weights_strides_plans_and_shapes_each_change_the_name():
    base, names = small(), set()
    names.add(name(base))
    other = copy.deepcopy(base)
    with torch.no_grad():
        other[0].weight[0, 0] += 1e-6  # one bit of one weight
    names.add(name(other))
    layout = copy.deepcopy(base)
    layout[0].weight.data = layout[0].weight.data.t().contiguous().t()  # same values, K-major
    names.add(name(layout))
    planned = copy.deepcopy(base)
    planned[2].plan = Plan(2, 15)
    names.add(name(planned))
    names.add(name(base, rows=16))
    names.add(name(base, dtype=torch.bfloat16))
    assert len(names) == 6


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


def test_a_failed_build_leaves_no_file(tmp_path):
    class Unexportable(torch.nn.Module):
        def forward(self, x):
            raise ValueError("no graph here")

    path = tmp_path / "frame.pt2"
    with pytest.raises(Exception, match="no graph here"):  # dynamo wraps it
        packages.build(Unexportable(), (torch.ones(3),), path)
    assert list(tmp_path.iterdir()) == []


def test_packages_unused_for_a_month_are_pruned(tmp_path):
    old, recent = tmp_path / "kv-4-float32-cpu-old.pt2", tmp_path / "kv-4-float32-cpu-new.pt2"
    for path in (old, recent):
        path.write_bytes(b"package")
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    other = tmp_path / "notes.txt"  # not a package: left alone
    other.write_text("keep")
    os.utime(other, (month_ago, month_ago))
    assert packages.prune(tmp_path) == [old]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv-4-float32-cpu-new.pt2", "notes.txt"]


def test_loading_marks_a_package_used(tmp_path):
    """A real package (a 2-op module, built in seconds): loading it refreshes its time, so prune keeps it."""
    path = tmp_path / "double.pt2"

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    packages.build(Double(), (torch.ones(4),), path)
    month_ago = time.time() - 31 * 86400
    os.utime(path, (month_ago, month_ago))
    frame = packages.load(path)
    assert torch.equal(frame(torch.ones(4)), torch.full((4,), 3.0))
    assert packages.prune(tmp_path) == [] and path.exists()
