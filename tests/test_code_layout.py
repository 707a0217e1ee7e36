"""The code's shape (STYLE.md): no import cycle among omni_core's modules, no module over 300 lines
and no function over 60 in omni_core/ and app/; no code outside the family adapters (omni_core/families/)
asks which family it runs. The allow-lists name what is still over, to split:
they may only shrink (a name listed that is no longer over fails too)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60

# To split: modules still over MAX_MODULE_LINES.
LONG_MODULES: set[str] = set()

# To split: functions still over MAX_FUNCTION_LINES, as "path:qualified name".
LONG_FUNCTIONS: set[str] = set()


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The modules of `modules` that `path` names in an import, at any depth (lazy imports count).
    `from p import n` names p.n where that is a module, else p; a package's __init__ is not
    counted as imported by the modules below it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return (found & modules) - {name}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_in_omni_core():
    paths = sources("omni_core")
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imported(p, modules) for p in paths}
    assert import_cycles(graph) == []


def test_no_module_over_300_lines_but_those_listed_to_split():
    over = {str(p.relative_to(ROOT)) for p in sources("omni_core", "app")
            if len(p.read_text().splitlines()) > MAX_MODULE_LINES}
    assert over == LONG_MODULES


def test_no_function_over_60_lines_but_those_listed_to_split():
    over = set()
    for path in sources("omni_core", "app"):
        over.update(f"{path.relative_to(ROOT)}:{name}" for name, lines in functions(ast.parse(path.read_text()))
                    if lines > MAX_FUNCTION_LINES)
    assert over == LONG_FUNCTIONS


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines from its first decorator or `def` to its last line) of every function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield prefix + node.name, node.end_lineno - first + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")


# ---- one place per decision: the family adapters -------------------------------------------------------

FAMILY_NAMES = {"qwen3_omni", "qwen3_tts"}


def family_checks(tree: ast.AST) -> list[str]:
    """Where code asks which family it runs: a comparison with a family's name or with a `family` field, a
    `prompts is not None` (a Qwen3-TTS prompt builder), an `isinstance(step, int)` (a Qwen3-Omni text step)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [ast.unparse(side) for side in sides]
            if any(isinstance(c, ast.Constant) and c.value in FAMILY_NAMES for side in sides for c in ast.walk(side)) \
                    or any(n.endswith((".family", "['family']", '["family"]')) for n in named) \
                    or any(n.endswith("prompts") for n in named):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and len(node.args) == 2 \
                and "step" in ast.unparse(node.args[0]) and ast.unparse(node.args[1]) == "int":
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_family_check_finds_each_kind_of_check():
    code = """
if m.prompts is not None: pass
if cfg.family == "x": pass
tts = can["family"] == "y"
if name in ("qwen3_tts",): pass
reading = [s for s in steps if isinstance(step, int)]
ok = isinstance(value, int) and value == "qwen3"
"""
    assert [line.split(":")[0] for line in family_checks(ast.parse(code))] == ["2", "3", "4", "5", "6"]


def family_own(path: Path) -> bool:
    """The adapters, and a family's own code (its models, its part of the load recipe, its synthetic
    checkpoints), which may check what it reads is its own."""
    parts = path.relative_to(ROOT / "omni_core").parts
    return parts[0] == "families" or any(part.removesuffix(".py") in FAMILY_NAMES for part in parts[:2])


def test_no_family_check_outside_the_family_adapters():
    found = {f"{p.relative_to(ROOT)}:{where}" for p in sources("omni_core") if not family_own(p)
             for where in family_checks(ast.parse(p.read_text()))}
    assert found == set()
    assert family_own(ROOT / "omni_core/models/qwen3_tts/config.py")
    assert not family_own(ROOT / "omni_core/engine/runner.py")


STREAM_KINDS = {"StreamingDecoder", "LocalStream", "RemoteStream", "LocalCodec", "CodecPool", "CodecProcess"}


def stream_kind_checks(tree: ast.AST) -> list[str]:
    """Where code asks which kind of codec stream (or codec) it holds: an isinstance with one of their classes."""
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and len(node.args) == 2
            and set(ast.unparse(node.args[1]).strip("()").replace(" ", "").split(",")) & STREAM_KINDS]


def test_no_codec_stream_kind_check_outside_the_codec_stream_interface():
    assert stream_kind_checks(ast.parse("ok = isinstance(d, (int, RemoteStream))")) != []
    found = {f"{p.relative_to(ROOT)}:{where}" for p in sources("omni_core")
             for where in stream_kind_checks(ast.parse(p.read_text()))}
    assert found == set()
