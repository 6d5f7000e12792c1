"""The package's layers, checked on its source: no import cycle, torch._inductor only under inductor/,
triton never at module level outside the GPU harness, and nothing in the compile path imports offline code
or the offline extras (read from the source, imports inside functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kernel_select"
EXTRAS = ("pandas", "pyarrow", "scipy", "tqdm", "matplotlib", "transformers", "lightgbm")


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> dict[str, bool]:
    """{imported module (resolved to one of `modules` where it is ours): at module level?} for one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found: dict[str, bool] = {}

    def add(name: str, node: ast.AST) -> None:
        while name.startswith("kernel_select") and name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        found[name] = found.get(name, False) or id(node) in top

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                add(full if full in modules else node.module, node)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, dict[str, bool]]:
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    return {name: imports(path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over imports among `graph`'s keys."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


GRAPH = import_graph()
COMPILE_PATH = [name for name in GRAPH if not name.startswith(("kernel_select.offline", "kernel_select.cli"))]


def test_no_import_cycle_in_the_package():
    # Imports inside functions and under TYPE_CHECKING count: one that exists only to dodge a cycle
    # hides two modules that need each other, whose shared piece belongs in a third (bench and
    # timer, pretune and pretune_gpu, compare_models and model_report had such imports).
    assert cycles(GRAPH) == []


def test_only_the_inductor_adapter_imports_torch_inductor():
    offenders = [name for name in COMPILE_PATH if not name.startswith("kernel_select.inductor")
                 and any(dep.startswith("torch._inductor") for dep in GRAPH[name])]
    assert offenders == []


def test_triton_is_imported_lazily_outside_the_harness():
    offenders = [name for name in GRAPH if not name.startswith("kernel_select.offline.harness")
                 and GRAPH[name].get("triton")]
    assert offenders == []


@pytest.mark.parametrize("name", COMPILE_PATH)
def test_the_compile_path_imports_no_offline_code_and_no_extra(name):
    bad = [dep for dep in GRAPH[name]
           if dep.startswith("kernel_select.offline") or dep.split(".")[0] in EXTRAS]
    assert bad == []


def test_the_checks_see_a_cycle_and_a_lazy_import(tmp_path):
    package = tmp_path / "kernel_select"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from kernel_select import b\n")
    (package / "b.py").write_text("def f():\n    import kernel_select.a\n    import triton\n")
    graph = import_graph(package)
    assert cycles(graph) == [["kernel_select.a", "kernel_select.b"]]
    assert graph["kernel_select.b"]["triton"] is False  # inside a function
