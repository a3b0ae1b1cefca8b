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
        "a2a/__init__.py",
        "config/__init__.py",
        "vault/__init__.py",
        "store/__init__.py",
        "observability/__init__.py",
        "access/__init__.py",
        "audit/__init__.py",
    }
    assert boxes <= folders


LAYERS: list[tuple[str, ...]] = [
    (
        "hatchway.errors",
        "hatchway.ids",
        "hatchway.principal",
        "hatchway.redaction",
        "hatchway.egress",
        "hatchway.json_limits",
        "hatchway.environment",
    ),
    ("hatchway.config", "hatchway.store", "hatchway.vault"),
    ("hatchway.credentials", "hatchway.limits", "hatchway.access", "hatchway.audit"),
    ("hatchway.engine",),
    ("hatchway.responses", "hatchway.mcp_server", "hatchway.a2a"),
    ("hatchway.api", "hatchway.cli"),
]
"""DESIGN.md's boxes, lowest first: a module imports only from its own layer or those below it."""


def _layer(module: str) -> int | None:
    for depth, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return depth
    return None


def test_each_layer_imports_only_from_itself_and_the_layers_below() -> None:
    upward = []
    for name, targets in graph().items():
        mine = _layer(name)
        if mine is None:
            continue
        upward += [
            f"{name} → {t}" for t in sorted(targets) if (theirs := _layer(t)) is not None and theirs > mine
        ]
    assert upward == []


def test_the_layers_name_real_packages() -> None:
    present = {
        p for prefixes in LAYERS for p in prefixes if any(m == p or m.startswith(p + ".") for m in MODULES)
    }
    assert {"hatchway.limits", "hatchway.principal", "hatchway.redaction", "hatchway.egress"} <= present
    assert "hatchway.mcp_server" in present


MCP_ROUTING = ("hatchway.engine.tools.mcp.catalog", "hatchway.engine.tools.mcp.toolset")
"""Where an MCP tool is listed, allowlisted, pinned, named and a call routed to its server: the
engine's one catalog, and the loop's toolset over it."""


def test_api_holds_no_mcp_routing() -> None:
    """Which server's tool a name reaches is decided once, in the engine's catalog, for the loop and
    for the MCP server service (``mcp_server/``); ``api/`` only routes a request to its endpoint."""
    edges = graph()
    routers = sorted(name for name, targets in edges.items() if targets & set(MCP_ROUTING))
    assert [m for m in routers if not m.startswith(("hatchway.engine.", "hatchway.mcp_server."))] == []
    assert "hatchway.mcp_server.endpoint" in routers
    glue = [
        f"{name} → {target}"
        for name, targets in edges.items()
        if name.startswith("hatchway.api.mcp_endpoints")
        for target in sorted(targets)
        if target.startswith("hatchway.engine.tools.")
    ]
    assert glue == []


def _layout_block(text: str, first_line: str) -> str:
    start = text.index("```\n" + first_line)
    return text[start : text.index("```\n", start + 4)]


def test_the_layout_in_the_docs_names_every_package() -> None:
    """The README's layout and docs/architecture.md's boxes name every package of src/hatchway (and
    the engine's), so a folder added or moved shows up as a failure here, not as a stale map."""
    packages = sorted(p.name + "/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    engine = sorted(p.name + "/" for p in (PACKAGE / "engine").iterdir() if (p / "__init__.py").exists())
    readme = _layout_block((ROOT / "README.md").read_text(encoding="utf-8"), "src/hatchway/\n")
    boxes = _layout_block((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"), "api/ ")
    listed = {word for line in (readme + boxes).splitlines() for word in line.split()}
    assert [p for p in packages + engine if p not in listed] == []
    # …and nothing that is no longer there: every folder-like word of the boxes is a real package.
    real = {p.name + "/" for p in [*PACKAGE.rglob("*"), *ROOT.iterdir()] if p.is_dir()} | {"src/hatchway/"}
    named = {w for w in listed if w.endswith("/") and w[:-1].replace("_", "").isalpha()}
    assert sorted(named - real) == []
