"""packages.py: what a compiled package's name depends on, and that a failed build leaves nothing
behind. (Building and loading real packages: test_compiled.py.)"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two real packages (a 3-op module, built in seconds) of the same shapes, the second with other
    weights: [(module, path)], under their own names in a folder of their own."""
    folder = tmp_path_factory.mktemp("packages")
    first = small().eval()
    second = copy.deepcopy(first)
    with torch.no_grad():
        second[2].weight.neg_()
    pairs = [(module, folder / name(module)) for module in (first, second)]
    for module, path in pairs:
        packages.build(module, (torch.ones(3, 8),), path)
    return pairs


def test_a_package_computes_with_the_weights_it_was_built_from(built):
    """Weights are frozen into a package (constants in its C++), so two modules of the same shapes with
    other weights get packages of their own, and each computes what its own module computes."""
    (first, first_path), (second, second_path) = built
    assert first_path != second_path
    x = torch.randn(3, 8)
    with torch.no_grad():
        got = [packages.load(path)(x) for path in (first_path, second_path)]
        want = [first(x), second(x)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert not torch.allclose(got[0], got[1], atol=1e-2)


def test_loading_marks_a_package_used(built):
    """Loading a package refreshes its time, so prune keeps it."""
    (module, path), (_, other) = built
    month_ago = time.time() - 31 * 86400
    for p in (path, other):
        os.utime(p, (month_ago, month_ago))
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(packages.load(path)(x), module(x))
    assert packages.prune(path.parent) == [other] and path.exists() and not other.exists()


def test_a_killed_process_leaves_no_extracted_package(built, tmp_path):
    """torch extracts a package into a temporary folder and deletes it only at a normal exit; `load`
    deletes it once loaded, so a process that is killed (a stopped Space, an out-of-memory kill) leaves
    nothing behind (4.7 GB a frame at real size). The package still computes after the deletion."""
    (module, path), _ = built
    temp = tmp_path / "temp"
    temp.mkdir()
    script = (f"import os, signal, torch\nfrom omni_core.fast import packages\n"
              f"frame = packages.load({str(path)!r})\n"
              f"x = torch.ones(3, 8)\nprint(float(frame(x).sum()), flush=True)\n"
              f"os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(Path(__file__).parents[1]))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr
    with torch.no_grad():
        assert float(run.stdout) == pytest.approx(float(module(torch.ones(3, 8)).sum()), rel=1e-5)
    assert list(temp.iterdir()) == []


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
    """Two processes wanting one package (two test workers, two starts at once): the second waits until the
    first has built it, then finds it (and loads it) instead of compiling it beside it."""
    path = tmp_path / "frame.pt2"
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
    assert packages.prune(tmp_path, days=-1) == [path, tmp_path / ".frame.pt2.lock"]  # its lock file goes too
