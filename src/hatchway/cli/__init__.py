"""The ``hatchway`` command line.

A command's module is imported when that command runs: the serving process (``hatchway serve``)
holds neither the other commands nor what they import (the docs generator, the log reader, the
agent-file checker: about 2 MiB resident). ``hatchway --help``, a name that is no command, and
``from hatchway.cli import app`` import every command, in the order ``hatchway --help`` shows them.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

COMMANDS: dict[str, str] = {
    # command: its module under hatchway.cli; in the order of `hatchway --help` within each panel
    "serve": "serve",
    "migrate": "serve",
    "worker": "worker",
    "demo": "demo",
    "orgs": "admin",
    "keys": "admin",
    "secrets": "secrets",
    "vault": "secrets",
    "plugin": "plugin",
    "agent": "agent",
    "schema": "schema",
    "mcp": "mcp",
    "logs": "logs",
    "usage": "usage",
    "audit": "audit",
    "limits": "limits",
    "connections": "connections",
    "tools": "tools",
}


def _register(modules: list[str]) -> Any:
    """Import these command modules (each adds its commands to the one Typer app) and return it."""
    for module in dict.fromkeys(modules):
        importlib.import_module(f"hatchway.cli.{module}")
    from hatchway.cli.program import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # every command, imported once: later lookups find the module's attribute
        globals()["app"] = _register(list(COMMANDS.values()))
        return globals()["app"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else None
    _register([COMMANDS[command]] if command in COMMANDS else list(COMMANDS.values()))()


__all__ = ["app", "main"]
