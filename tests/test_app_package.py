"""The app package's rule (app/__init__.py): every module in app/ uses only omni_core's public API,
and never torch."""

from __future__ import annotations

import ast
from pathlib import Path

import omni_core

APP_DIR = Path(__file__).resolve().parent.parent / "app"


def test_app_uses_only_omni_cores_public_api_and_never_torch():
    public = set(omni_core.__all__)
    for path in APP_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
                assert not any(n.split(".")[0] in ("torch", "omni_core") for n in names), f"{path.name}: {names}"
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] != "torch", path.name
                if node.module.startswith("omni_core"):
                    assert node.module == "omni_core", f"{path.name} reaches into {node.module}"
                    assert {a.name for a in node.names} <= public, path.name
