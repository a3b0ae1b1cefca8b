"""The ``hatchway`` command line."""

from __future__ import annotations

# isort: off
# The import order is the order of the commands in `hatchway --help`.
from hatchway.cli import serve, worker, demo, admin, secrets, plugin, agent, schema, mcp, logs  # noqa: F401
from hatchway.cli import usage, limits, connections, tools  # noqa: F401

# isort: on
from hatchway.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
