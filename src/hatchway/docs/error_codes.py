"""Find every error ``code`` the source can produce, and the error class that carries each one.

Read from the source itself (``ast``), so docs/errors.md cannot miss a code someone adds:

- ``SomeError(..., code="x")`` — a code bound to an error class (its HTTP status and ``type``);
- ``default_code = "x"`` of the classes under ``HatchwayError``;
- ``ToolResult.error("x", …)``, ``error_body("x", …)`` and ``_error_result(kind, "x", …)`` — what the
  model reads as a tool result; ``tool_error(…, code="x")`` — an MCP endpoint's ``isError`` result;
- ``_failure("x", …)`` / ``failure("x", …)`` — a ``spawn_subagent`` result's ``error_code``;
- dict literals with a ``"code"`` key — a tool result's error (``{"code", "message"}``) or, with a
  ``"type"`` key too, a stored response's ``error``; ``code = …`` assignments likewise (in the
  Responses modules, a response's error; elsewhere, a tool result's).

A code may be a module-level constant (``CHILD_FAILED = "child_request_failed"``) named where it is
used, in that module or another.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import hatchway
from hatchway.errors import HatchwayError

PACKAGE_DIR = Path(hatchway.__file__).parent
_CODE = re.compile(r"^[a-z][a-z0-9_]*$")
_SKIPPED = ("demo", "docs")  # generators and the demo produce no API errors of their own
_POSITIONAL = {
    "_error_result": (1, "tool_result"),
    "error_body": (0, "tool_result"),
    "_failure": (0, "subagent"),
    "failure": (0, "subagent"),
}
"""Helpers taking a code positionally: (argument index, kind of use)."""
_TOOL_RESULT_KEYWORD = {"tool_error"}
"""Helpers taking a tool result's code as ``code=`` (an MCP endpoint's ``isError`` results)."""


@dataclass(frozen=True, order=True)
class CodeUse:
    """One place a code is produced."""

    code: str
    kind: str
    """``class`` (bound to ``raiser``), ``tool_result``, ``subagent`` or ``response``."""
    raiser: str = ""
    """The error class name, for ``class`` uses."""
    module: str = ""


def error_classes() -> dict[str, type[HatchwayError]]:
    """Every subclass of HatchwayError defined by Hatchway, by name (import the modules first)."""
    found: dict[str, type[HatchwayError]] = {"HatchwayError": HatchwayError}
    pending = [HatchwayError]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub.__module__.startswith("hatchway.") and sub.__name__ not in found:
                found[sub.__name__] = sub
                pending.append(sub)
    return found


def scan(package_dir: Path = PACKAGE_DIR) -> list[CodeUse]:
    """Every code use in the package, sorted; the modules holding them are imported on the way."""
    uses: set[CodeUse] = set()
    trees = {}
    for path in sorted(package_dir.rglob("*.py")):
        relative = path.relative_to(package_dir)
        if relative.parts[0] in _SKIPPED:
            continue
        module = ".".join(("hatchway", *relative.with_suffix("").parts)).removesuffix(".__init__")
        trees[module] = ast.parse(path.read_text(encoding="utf-8"))
    names = _module_constants(trees.values())
    for module, tree in trees.items():
        found = list(_uses_in(tree, module, names))
        if any(u.kind == "class" for u in found) or _defines_default_code(tree):
            importlib.import_module(module)  # so error_classes() sees classes defined there
        uses.update(found)
    classes = error_classes()
    for cls in classes.values():
        if "default_code" in vars(cls) and cls.default_code:
            uses.add(CodeUse(cls.default_code, "class", cls.__name__, cls.__module__))
    return sorted(u for u in uses if u.kind != "class" or u.raiser in classes)


def _defines_default_code(tree: ast.Module) -> bool:
    """Whether the module defines a class with its own ``default_code`` (an error class)."""
    return any(
        isinstance(node, ast.ClassDef)
        and any(
            isinstance(stmt, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "default_code"
                for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
            )
            for stmt in node.body
        )
        for node in tree.body
    )


def _module_constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """``NAME = "a_code"`` at the top of any module: what the name means where it is used."""
    names: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.isupper()
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and _CODE.match(node.value.value)
            ):
                names[node.targets[0].id] = node.value.value
    return names


def _uses_in(tree: ast.AST, module: str, names: dict[str, str]) -> list[CodeUse]:
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            uses += _call_uses(node, module, names)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "code" for t in node.targets
        ):
            # ``code = "a" if … else "b"`` before a response's error or a tool result is built
            kind = "response" if module.startswith("hatchway.responses") else "tool_result"
            uses += [CodeUse(c, kind, "", module) for c in _constants(node.value, names)]
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            kind = "response" if "type" in keys else "tool_result"
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in ("code", "error_code"):
                    subagent = key.value == "error_code"
                    uses += [
                        CodeUse(c, "subagent" if subagent else kind, "", module)
                        for c in _constants(value, names)
                    ]
    return uses


def _call_uses(call: ast.Call, module: str, names: dict[str, str]) -> list[CodeUse]:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    kind = "tool_result" if name in _TOOL_RESULT_KEYWORD else "class"
    uses = [
        CodeUse(c, kind, "" if kind == "tool_result" else name, module)
        for kw in call.keywords
        if kw.arg == "code"
        for c in _constants(kw.value, names)
    ]
    where = (0, "tool_result") if _is_tool_result_error(func) else _POSITIONAL.get(name)
    if where is not None and len(call.args) > where[0]:
        uses += [CodeUse(c, where[1], "", module) for c in _constants(call.args[where[0]], names)]
    return uses


def _is_tool_result_error(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "error"
        and isinstance(func.value, ast.Name)
        and func.value.id == "ToolResult"
    )


def _constants(node: ast.expr, names: dict[str, str]) -> list[str]:
    """The code-like string constants an expression can evaluate to (``"x"``, ``a or "x"``,
    ``"x" if c else "y"``, ``A_CODE``); constants inside calls or conditions are not codes."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and _CODE.match(node.value) else []
    if isinstance(node, ast.Name) and node.id in names:
        return [names[node.id]]
    if isinstance(node, ast.BoolOp):
        return [c for value in node.values for c in _constants(value, names)]
    if isinstance(node, ast.IfExp):
        return _constants(node.body, names) + _constants(node.orelse, names)
    return []
