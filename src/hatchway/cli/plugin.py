"""``hatchway plugin check FILE``: validate a plugin YAML file and summarise it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hatchway.cli.program import app, err_console, examples
from hatchway.config.plugin import McpServerConfig, PluginConfig, load_plugin
from hatchway.engine.tools.mcp.forwarding import DROPPED_WHY
from hatchway.errors import ConfigError

plugin_app = typer.Typer(help="MCP plugin files (plugin YAML v1).", no_args_is_help=True)
app.add_typer(plugin_app, name="plugin", rich_help_panel="Check configuration")


@plugin_app.command(
    "check",
    epilog=examples(
        "hatchway plugin check examples/plugins/research.yaml",
        "hatchway schema plugin    (the JSON Schema, for editors)",
    ),
)
def plugin_check(file: Annotated[Path, typer.Argument(help="The plugin YAML file.")]) -> None:
    """Validate FILE: print "ok" and a summary, or every problem with its field path (exit 1)."""
    try:
        plugin = load_plugin(file)
    except ConfigError as exc:
        err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    typer.echo(f"ok: {file}")
    for line in summary(plugin):
        typer.echo(f"  {line}")
    for i, server in enumerate(plugin.mcp_servers):
        if server.kind == "sse":
            err_console.print(
                f"[bold yellow]warning:[/] mcp_servers[{i}].transport: sse (HTTP+SSE) is deprecated since "
                "MCP 2026-07-28 and will be removed; it keeps working, but move to streamable_http",
                highlight=False,
                soft_wrap=True,
            )
        for name in server.dropped_headers:
            err_console.print(
                f"[bold yellow]warning:[/] mcp_servers[{i}].forward_headers: {name!r} is dropped "
                f"({DROPPED_WHY})",
                highlight=False,
                soft_wrap=True,
            )


def summary(plugin: PluginConfig) -> list[str]:
    """One line per server, then the agent loop settings."""
    lines = [f"mcp_servers: {len(plugin.mcp_servers)}"]
    lines.extend(f"  {_server_line(s)}" for s in plugin.mcp_servers)
    a = plugin.agent
    lines.append(
        f"agent: max_rounds {a.max_rounds}, stream_mode {a.stream_mode}, "
        f"tool_call_parallel {str(a.tool_call_parallel).lower()}, "
        f"tool_cache_ttl_seconds {a.tool_cache_ttl_seconds}"
    )
    return lines


def _server_line(server: McpServerConfig) -> str:
    tools = "*" if server.tools == "*" else ", ".join(server.tools)
    ref = server.auth.secret_ref or server.auth.private_key_ref
    auth = server.auth.type if ref is None else f"{server.auth.type} ({ref})"
    if server.auth.client_auth is not None:
        auth += f", {server.auth.client_auth}"
    parts = [
        f"{server.id}: {server.kind} {server.target}",
        f"auth {auth}",
        f"tools {tools}",
        f"timeout_ms {server.timeout_ms}",
        f"max_retries {server.max_retries}",
    ]
    if server.forward_headers:
        parts.append(f"forward_headers {', '.join(server.forward_headers)}")
    return "; ".join(parts)
