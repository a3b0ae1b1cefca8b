"""``hatchway agent check DIR|NAME``: validate an agent's tools.yaml, tool_policies.yaml and plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hatchway.cli.program import DEFAULT_CONFIG, ConfigOption, app, err_console, examples, fail, settings_from
from hatchway.config.agent_files import (
    AgentFiles,
    AgentTools,
    agent_files_in,
    agent_files_of,
    inspect_agent_files,
)

agent_app = typer.Typer(help="Agents: tools.yaml, tool_policies.yaml and their plugin.", no_args_is_help=True)
app.add_typer(agent_app, name="agent", rich_help_panel="Check configuration")


def _files_for(target: str, config: Path) -> AgentFiles:
    directory = Path(target)
    if directory.is_dir():
        if not (directory / "tools.yaml").exists():
            raise fail(f"{directory}: no tools.yaml in this directory")
        return agent_files_in(directory)
    settings = settings_from(config)
    agent = next((a for a in settings.agents if a.name == target), None)
    if agent is None:
        known = ", ".join(a.name for a in settings.agents) or "none"
        raise fail(f"{target}: neither a directory nor an agent of {config} (agents: {known})")
    files = agent_files_of(agent, settings)
    if files is None:
        raise fail(f"agent {target!r} has no tools file (add `tools:` to its entry in {config})")
    return files


def _summary_line(agent_tools: AgentTools, name: str) -> str:
    tool = agent_tools.tools[name]
    policy = agent_tools.policy(name)
    parts = [
        f"  {name}{'' if tool.enabled else ' (disabled)'}",
        f"server={tool.mcp_server}",
        policy.operation_type.value,
        f"confirmation={'yes' if policy.require_confirmation else 'no'}",
        f"requires={','.join(policy.requires) or '-'}",
    ]
    if policy.pre_validation is not None:
        fail_open = str(policy.pre_validation.fail_open).lower()
        parts.append(f"pre_validation={policy.pre_validation.tool}(fail_open={fail_open})")
    for rule in policy.approvals:
        count = f" x{rule.required}" if rule.required > 1 else ""
        parts.append(f"approval={rule.name or 'rule'}({rule.approvers.label()}{count})")
    parts.append(f"policy from {policy.source}")
    return "  ".join(parts)


@agent_app.command(
    "check",
    epilog=examples(
        "hatchway agent check examples/agents/contas",
        "hatchway agent check contas --config examples/hatchway.yaml",
    ),
)
def check(
    target: Annotated[str, typer.Argument(help="An agent directory (with tools.yaml) or an agent name.")],
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Validate an agent's files; print every problem with its file and field path."""
    files = _files_for(target, config)
    agent_tools, errors = inspect_agent_files(files)
    if errors:
        for error in errors:
            err_console.print(f"[bold red]error:[/] {error.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    assert agent_tools is not None
    checked = [str(p) for p in (files.tools, files.policies, files.plugin) if p is not None]
    typer.echo(f"ok: {files.label}: {len(agent_tools.tools)} tools ({', '.join(checked)})")
    if files.plugin is None:
        typer.echo("note: no plugin file, so the mcp_server ids were not checked")
    for name in agent_tools.tools:
        typer.echo(_summary_line(agent_tools, name))
