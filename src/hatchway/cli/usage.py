"""``hatchway usage``: an organisation's requests, tokens and spend, read straight from the database."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from hatchway.cli.logs import parse_time
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
from hatchway.engine.pricing import table_version
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.store.usage import USAGE_GROUPS, UsageQuery, UsageReport, UsageStore, usage_to_dict


async def _read(config: Path, org: str, query: UsageQuery) -> UsageReport:
    settings = settings_from(config)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        org_row = await OrgStore(db).get_org(org)
        return await UsageStore(db).summarise(org_row.id, query)
    finally:
        await db.close()


@app.command(
    "usage",
    rich_help_panel="Observe",
    epilog=examples(
        "hatchway usage --org acme",
        "hatchway usage --org acme --group-by user --since 2026-01-01 --until 2026-02-01",
        "hatchway usage --org acme --group-by key --json | jq '.totals.cost_usd'",
    ),
)
def usage(
    org: Annotated[str, typer.Option("--org", help="Organisation name or id.")],
    group_by: Annotated[
        str, typer.Option("--group-by", help=f"One of {', '.join(USAGE_GROUPS)} (user: X-On-Behalf-Of).")
    ] = "model",
    since: Annotated[str | None, typer.Option("--since", help="ISO 8601 time (UTC if no offset).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601 time (UTC if no offset).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many groups.")] = 100,
    json_output: Annotated[bool, typer.Option("--json", help="Print what GET /v1/usage answers.")] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Show an organisation's requests, tokens and spend per key, end user, agent or model."""
    if group_by not in USAGE_GROUPS:
        raise fail(f"--group-by: must be one of {', '.join(USAGE_GROUPS)} (got {group_by!r})")
    query = UsageQuery(
        group_by=group_by, since=parse_time("--since", since), until=parse_time("--until", until), limit=limit
    )
    if query.since and query.until and query.since >= query.until:
        raise fail("--until: must be later than --since")
    report = run_async(lambda: _read(config, org, query))
    if json_output:
        typer.echo(as_json(usage_to_dict(report, query)))
        return
    console.print(_table(report, query))


def _table(report: UsageReport, query: UsageQuery) -> Table:
    caption = f"USD priced by {table_version()} and hatchway.yaml's models[].price"
    if report.has_more:
        caption = f"the {query.limit} costliest groups (--limit); " + caption
    table = Table(query.group_by, caption=caption)
    for name in ("requests", "prompt", "completion", "tokens", "cost (USD)", "unpriced"):
        table.add_column(name, justify="right")
    for group in report.groups:
        name = group.group if query.group_by != "key" else group.key_name or group.group
        table.add_row(*_cells(name or "-", group.to_dict(None)))
    table.add_section()
    table.add_row(*_cells("[bold]total[/]", report.totals.to_dict(None)))
    return table


def _cells(name: str, sums: dict[str, Any]) -> list[str]:
    unpriced = sums["unpriced_requests"]
    unknown = unpriced and not sums["cost_usd"]  # nothing of it was priced: not "free"
    return [
        name,
        str(sums["requests"]),
        str(sums["prompt_tokens"]),
        str(sums["completion_tokens"]),
        str(sums["total_tokens"]),
        "[yellow]unknown[/]" if unknown else f"{sums['cost_usd']:.6f}",
        f"[yellow]{unpriced}[/]" if unpriced else "-",
    ]
