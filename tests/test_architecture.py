"""The house as DESIGN.md draws it, read from the source: no import cycles between modules (type-only
and function-local imports included), ``Gateway`` held only by the API layer and the CLI, and one
folder per box of the design."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.paths import ROOT

SRC = ROOT / "src"
PACKAGE = SRC / "hatchway"
FACADE = "hatchway"
"""The top-level package re-exports the public names lazily; it is not part of the graph."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path: Path) -> Iterator[tuple[str, str]]:
    """``(module, imported name or "")`` for every import anywhere in the file, resolved to our modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, ""
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    yield f"{source}.{alias.name}", ""
                elif source in MODULES:
                    yield source, alias.name


def graph() -> dict[str, set[str]]:
    edges = {name: {m for m, _ in imported(name, path)} for name, path in MODULES.items()}
    edges.pop(FACADE)
    return {name: targets - {FACADE, name} for name, targets in edges.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    edges = graph()
    assert "hatchway.errors" in edges["hatchway.engine.context"]  # a module-level import
    assert "hatchway.engine.context" in edges["hatchway.engine.tools.subagents.contract"]  # type-only
    assert "hatchway.engine.tools.mcp.toolset" in edges["hatchway.engine.tools.mcp.binding"]  # in a function


def test_the_detector_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert cycles(graph()) == []


def test_only_the_api_layer_and_the_cli_hold_the_gateway() -> None:
    holders = sorted(
        name
        for name, path in MODULES.items()
        if name not in (FACADE, "hatchway.gateway")
        and any(m == "hatchway.gateway" for m, _ in imported(name, path))
    )
    outside = [m for m in holders if not m.startswith(("hatchway.api.", "hatchway.cli."))]
    assert outside == []


def test_the_folders_are_the_boxes_of_the_design() -> None:
    folders = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")}
    boxes = {
        "api/__init__.py",
        "engine/__init__.py",
        "engine/providers/__init__.py",
        "engine/tools/__init__.py",
        "engine/tools/mcp/__init__.py",
        "engine/tools/operations/__init__.py",
        "engine/tools/subagents/__init__.py",
        "responses/__init__.py",
        "config/__init__.py",
        "vault/__init__.py",
        "store/__init__.py",
        "observability/__init__.py",
    }
    assert boxes <= folders
