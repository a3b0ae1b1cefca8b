"""``hatchway tools …``: tool-definition pins (docs/security.md, "Tool-definition pinning").

``diff`` shows each tool of an organisation whose MCP server now describes it otherwise than when it
was approved (or a tool the server added under strict pinning), as a unified diff of the two
definitions; ``approve`` accepts what the server says now, and the tool is offered to the model again
at its next listing, on every replica (the pins are in the store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    as_json,
    console,
    examples,
    fail,
    run_async,
    settings_from,
)
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.store.tool_pins import ToolPins

tools_app = typer.Typer(
    help="MCP tool-definition pins: what drifted, and approving it.", no_args_is_help=True
)
app.add_typer(tools_app, name="tools", rich_help_panel="Organisations and secrets")

OrgOption = Annotated[str, typer.Option("--org", help="An organisation's name or id.")]
ServerOption = Annotated[str | None, typer.Option("--server", help="Only this MCP server (its id).")]


async def _with_pins(config: Path, org: str, action: Any) -> Any:
    db = Database(settings_from(config).database_url)
    try:
        await db.migrate()
        org_id = (await OrgStore(db).get_org(org)).id
        return await action(ToolPins(db), org_id)
    finally:
        await db.close()


@tools_app.command(
    "diff",
    epilog=examples(
        "hatchway tools diff --org acme", "hatchway tools diff --org acme --server tickets --json"
    ),
)
def tools_diff(
    org: OrgOption,
    server: ServerOption = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """The tools withheld or warned about because their definition is not the approved one."""

    async def action(pins: ToolPins, org_id: str) -> list[dict[str, Any]]:
        return await pins.waiting(org_id, server)

    waiting: list[dict[str, Any]] = run_async(lambda: _with_pins(config, org, action))
    if json_output:
        console.print(as_json(waiting), highlight=False, soft_wrap=True)
        return
    if not waiting:
        console.print(f"no tool of {org} waits for approval", highlight=False)
        return
    from rich.syntax import Syntax  # pygments: for this command only, not in every `hatchway` process

    for pin in waiting:
        change = "changed since approved" if pin["change"] == "drifted" else "added since pinned"
        console.print(f"[bold]{pin['server']}/{pin['tool']}[/]: {change} (seen {pin['seen_at']})")
        console.print(Syntax(pin["diff"], "diff", theme="ansi_dark", word_wrap=True))
    console.print(f"approve with: hatchway tools approve SERVER [TOOL …] --org {org}", highlight=False)


@tools_app.command(
    "approve",
    epilog=examples(
        "hatchway tools approve tickets --org acme", "hatchway tools approve tickets close_ticket --org acme"
    ),
)
def tools_approve(
    server: Annotated[str, typer.Argument(help="The MCP server's id.")],
    tools: Annotated[
        list[str] | None, typer.Argument(help="Its tools to approve (default: each waiting).")
    ] = None,
    org: OrgOption = ...,  # type: ignore[assignment]
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Approve what SERVER says now of its waiting tools: they are offered to the model again."""

    async def action(pins: ToolPins, org_id: str) -> list[str]:
        return await pins.approve(org_id, server, tools or None)

    approved: list[str] = run_async(lambda: _with_pins(config, org, action))
    if not approved:
        raise fail(f"no tool of {server} waits for approval in {org}")
    unknown = sorted(set(tools or []) - set(approved))
    for name in approved:
        console.print(f"approved [bold]{server}/{name}[/] in {org}", highlight=False)
    if unknown:
        raise fail(f"not waiting for approval: {', '.join(unknown)}")
