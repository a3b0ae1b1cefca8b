"""``hatchway --help`` and every subcommand's help: a one-line summary, and examples for each command."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hatchway.cli import app

ROOT_COMMAND = typer.main.get_command(app)


def is_group(command: Any) -> bool:
    return hasattr(command, "commands")  # Typer's own (vendored) click: duck-typed


def commands(group: Any = ROOT_COMMAND, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path: groups and the commands under them."""
    found = []
    for name, command in group.commands.items():
        path = (*prefix, name)
        found.append(path)
        if is_group(command):
            found += commands(command, path)
    return found


def command_at(path: tuple[str, ...]) -> Any:
    command = ROOT_COMMAND
    for name in path:
        command = command.commands[name]
    return command


def test_the_top_level_help_groups_the_commands_and_shows_first_steps() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    for panel in ("Run", "Organisations and secrets", "Check configuration", "Observe"):
        assert panel in result.stdout
    assert "First steps:" in result.stdout and "hatchway keys create --org acme" in result.stdout
    listed = {path[0] for path in commands()}
    assert {
        "serve",
        "demo",
        "orgs",
        "keys",
        "secrets",
        "vault",
        "plugin",
        "agent",
        "mcp",
        "logs",
        "schema",
    } <= listed


@pytest.mark.parametrize("path", commands(), ids=" ".join)
def test_every_command_has_a_summary_and_every_leaf_an_example(path: tuple[str, ...]) -> None:
    command = command_at(path)
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    summary = (command.help or "").strip().splitlines()[0]
    assert summary[:1].isupper() and summary.endswith("."), f"{' '.join(path)}: {summary!r}"
    if not is_group(command):
        assert (command.epilog or "").startswith("Examples:"), f"{' '.join(path)} has no examples"
        assert "Examples:" in result.stdout
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert param.help, f"{' '.join(path)} {param.opts[0]} has no help"
