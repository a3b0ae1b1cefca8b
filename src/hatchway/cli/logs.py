"""``hatchway logs``: an organisation's request log, read straight from the database."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

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
from hatchway.store.logs import LOG_STATUSES, LogQuery, RequestLogStore, log_to_dict
from hatchway.store.orgs import OrgStore


def parse_time(option: str, value: str | None) -> datetime | None:
    """An option's ISO 8601 time (UTC when it has no offset), or exit naming the option."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"{option}: not an ISO 8601 time such as 2026-01-31T12:00:00Z (got {value!r})") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


async def _read(config: Path, org: str, query: LogQuery) -> list[dict[str, Any]]:
    settings = settings_from(config)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        org_row = await OrgStore(db).get_org(org)
        return [log_to_dict(r) for r in await RequestLogStore(db).list(org_row.id, query)]
    finally:
        await db.close()


@app.command(
    "logs",
    rich_help_panel="Observe",
    epilog=examples(
        "hatchway logs --org acme --has-tool-calls --since 2026-01-31T00:00:00 --limit 20",
        "hatchway logs --org acme --status error --json | jq '.[0].steps'",
    ),
)
def logs(
    org: Annotated[str, typer.Option("--org", help="Organisation name or id.")],
    has_tool_calls: Annotated[
        bool | None,
        typer.Option("--has-tool-calls/--no-tool-calls", help="Only runs with (or without) tool calls."),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model or agent:<name> asked for.")] = None,
    status: Annotated[str | None, typer.Option("--status", help=f"One of {', '.join(LOG_STATUSES)}.")] = None,
    on_behalf_of: Annotated[str | None, typer.Option("--on-behalf-of", help="X-On-Behalf-Of value.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO 8601 time (UTC if no offset).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="ISO 8601 time (UTC if no offset).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many records.")] = 50,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the records as JSON, steps included.")
    ] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Show an organisation's request log, newest first: one row per request, or JSON with the steps."""
    if status is not None and status not in LOG_STATUSES:
        raise fail(f"--status: must be one of {', '.join(LOG_STATUSES)} (got {status!r})")
    query = LogQuery(
        has_tool_calls=has_tool_calls,
        model=model,
        status=status,
        on_behalf_of=on_behalf_of,
        since=parse_time("--since", since),
        until=parse_time("--until", until),
        limit=limit,
    )
    records = run_async(lambda: _read(config, org, query))
    if json_output:
        typer.echo(as_json(records))
        return
    console.print(_table(records))


def _table(records: list[dict[str, Any]]) -> Table:
    table = Table(
        "id", "time (UTC)", "model", "status", "finish", "rounds", "tools", "tokens", "ms", "on behalf of"
    )
    for r in records:
        tools = sum(1 for s in r["steps"] if s.get("type") == "tool_call")
        table.add_row(
            r["id"],
            datetime.fromtimestamp(r["created_at"], UTC).strftime("%Y-%m-%d %H:%M:%S"),
            r["model"] or "-",
            r["status"] if r["status"] == "ok" else f"[red]{r['status']} {r['http_status']}[/]",
            (r["finish_reason"] or "-") + (" (max_rounds)" if r["max_rounds_hit"] else ""),
            str(r["rounds"]),
            str(tools) if r["has_tool_calls"] else "-",
            str(r["usage"]["total_tokens"]),
            f"{r['latency_ms']:.0f}",
            r["on_behalf_of"] or "-",
        )
    return table
