"""The cache folder (omni_core/cache.py): named in one place, from the environment. The machine key
of its entries is tested with the entries (tests/test_packages.py, tests/test_plans.py)."""

from __future__ import annotations

from omni_core import cache


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("OMNI_CORE_CACHE", str(tmp_path))
    assert cache.cache_dir() == tmp_path
    monkeypatch.delenv("OMNI_CORE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "omni_core"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "omni_core"
