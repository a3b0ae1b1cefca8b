"""The ``hatchway`` command line."""

from __future__ import annotations

from hatchway.cli import admin, agent, logs, mcp, plugin, secrets, serve, worker  # noqa: F401  (registers commands)
from hatchway.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
