"""``hatchway <command>`` imports only that command's module (hatchway/cli/__init__.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hatchway.cli import COMMANDS, app


def _module_of(callback: object) -> str:
    return callback.__module__.removeprefix("hatchway.cli.")  # type: ignore[attr-defined]


def test_the_command_table_names_every_command_with_the_module_that_adds_it() -> None:
    registered = {}
    for command in app.registered_commands:
        registered[command.name or command.callback.__name__.replace("_", "-")] = _module_of(command.callback)
    for group in app.registered_groups:
        registered[group.name] = _module_of(group.typer_instance.registered_commands[0].callback)
    assert registered == COMMANDS


_RUN = """
import json, sys
sys.argv = ["hatchway", *sys.argv[1:]]
import hatchway.cli
try:
    hatchway.cli.main()
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m.startswith("hatchway.cli."))}))
"""


def _run(*args: str) -> tuple[str, dict]:
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *args], capture_output=True, text=True, timeout=60, env=env
    )
    *shown, last = done.stdout.strip().splitlines()
    return "\n".join(shown), json.loads(last)


def test_a_command_imports_only_its_own_module_and_the_program() -> None:
    shown, outcome = _run("serve", "--help")
    assert outcome == {"code": 0, "loaded": ["hatchway.cli.program", "hatchway.cli.serve"]}
    assert "Start the gateway" in shown
    shown, outcome = _run("keys", "--help")  # a group of commands, in a module with another group
    assert outcome == {"code": 0, "loaded": ["hatchway.cli.admin", "hatchway.cli.program"]}
    assert "create" in shown


def test_help_and_an_unknown_command_see_every_command() -> None:
    shown, outcome = _run("--help")
    assert outcome["code"] == 0
    assert {f"hatchway.cli.{m}" for m in COMMANDS.values()} <= set(outcome["loaded"])
    assert all(name in shown for name in COMMANDS)
    shown, outcome = _run("servee")
    assert outcome["code"] == 2
    assert {f"hatchway.cli.{m}" for m in COMMANDS.values()} <= set(outcome["loaded"])
