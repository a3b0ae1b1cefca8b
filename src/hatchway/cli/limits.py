"""``hatchway limits``: the limits in force (hatchway.yaml's ``limits:`` with those set here laid over
them) and setting them, straight in the database every replica reads (docs/limits.md, "Setting limits")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from hatchway.cli.admin import cli_actor, with_admin
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
from hatchway.config.settings import LimitsSettings, LimitValues
from hatchway.store.db import Database
from hatchway.store.limit_overrides import LIMIT_KEYS, LimitOverride, LimitOverrides, overlaid
from hatchway.store.limit_overrides import Table as Scope

limits_app = typer.Typer(
    help="Limits and budgets per organisation, key, end user and agent (docs/limits.md).",
    no_args_is_help=True,
)
app.add_typer(limits_app, name="limits", rich_help_panel="Organisations and secrets")

OrgOption = Annotated[str | None, typer.Option("--org", help="An organisation's name or id.")]
KeyOption = Annotated[str | None, typer.Option("--key", help="An API key's name or id ('*': each key).")]
UserOption = Annotated[str | None, typer.Option("--user", help="An end user (X-On-Behalf-Of; '*': each).")]
AgentOption = Annotated[str | None, typer.Option("--agent", help="An agent's name ('*': each agent).")]
DefaultsOption = Annotated[bool, typer.Option("--defaults", help="Each organisation's defaults.")]


def _scope(
    org: str | None, key: str | None, user: str | None, agent: str | None, defaults: bool
) -> tuple[Scope, str]:
    chosen: list[tuple[Scope, str]] = [
        (table, name)
        for table, name in (("organisations", org), ("keys", key), ("users", user), ("agents", agent))
        if name is not None
    ]
    if defaults:
        chosen.append(("defaults", ""))
    if len(chosen) != 1:
        raise fail("give exactly one of --org, --key, --user, --agent or --defaults", 2)
    table, name = chosen[0]
    if table != "defaults" and not name.strip():
        raise fail(f"--{table.removesuffix('s').replace('organisation', 'org')}: must not be empty", 2)
    return table, name


def _values(pairs: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or name not in LIMIT_KEYS:
            raise fail(f"{pair!r}: expected KEY=VALUE with KEY one of {', '.join(LIMIT_KEYS)}", 2)
        values[name] = raw
    try:  # checked as hatchway.yaml's are, so the error names the key
        return LimitValues.model_validate(values).model_dump(exclude_none=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise fail(f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}", 2) from None


async def _set(
    config: Path, table: Scope, name: str, values: dict[str, Any], unset: list[str]
) -> dict[str, Any]:
    return await with_admin(config, lambda admin: admin.set_limits(cli_actor(), table, name, values, unset))


async def _read(config: Path) -> tuple[LimitsSettings, list[LimitOverride]]:
    settings = settings_from(config)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        return settings.limits, await LimitOverrides(db).all()
    finally:
        await db.close()


@limits_app.command(
    "set",
    epilog=examples(
        "hatchway limits set --org acme requests_per_minute=600 budget_usd_per_day=50",
        "hatchway limits set --key ci-runner concurrent_runs=2",
        "hatchway limits set --user '*' tokens_per_minute=20000",
        "hatchway limits set --org acme --unset budget_usd_per_day",
    ),
)
def set_limits(
    values: Annotated[
        list[str] | None, typer.Argument(help="KEY=VALUE pairs, e.g. requests_per_minute=60.")
    ] = None,
    org: OrgOption = None,
    key: KeyOption = None,
    user: UserOption = None,
    agent: AgentOption = None,
    defaults: DefaultsOption = False,
    unset: Annotated[
        list[str] | None, typer.Option("--unset", help="A key to remove (hatchway.yaml's applies again).")
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Set one scope's limits over hatchway.yaml's (replicas apply them within limits.refresh_seconds)."""
    table, name = _scope(org, key, user, agent, defaults)
    parsed = _values(values or [])
    removed = unset or []
    if unknown := [k for k in removed if k not in LIMIT_KEYS]:
        raise fail(f"--unset {unknown[0]}: not a limit (one of {', '.join(LIMIT_KEYS)})", 2)
    if not parsed and not removed:
        raise fail("give KEY=VALUE pairs to set, or --unset KEY", 2)
    held = run_async(lambda: _set(config, table, name, parsed, removed))
    where = "defaults" if table == "defaults" else f"{table}.{name}"
    shown = ", ".join(f"{k}={v:g}" for k, v in held.items()) or "nothing (hatchway.yaml's apply)"
    console.print(f"limits.{where}: {shown}", highlight=False)


@limits_app.command("show", epilog=examples("hatchway limits show", "hatchway limits show --json"))
def show_limits(
    json_output: Annotated[
        bool, typer.Option("--json", help="The limits in force, as hatchway.yaml's limits: reads.")
    ] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Show the limits in force: hatchway.yaml's, and those set with `hatchway limits set` over them."""
    settings, overrides = run_async(lambda: _read(config))
    effective = overlaid(settings, overrides)
    if json_output:
        typer.echo(as_json(effective.model_dump(mode="json", exclude_none=True)))
        return
    from_store = {(row.table, row.name): set(row.values) for row in overrides}
    table = Table("scope", "limit", "value", "set in", caption="every scope's limits that are set")
    rows: list[tuple[str, str, LimitValues]] = [("defaults", "", effective.defaults)]
    for scope in ("organisations", "keys", "users", "agents"):
        rows += [(scope, name, values) for name, values in getattr(effective, scope).items()]
    for scope, name, values in rows:
        stored = from_store.get((scope, name), set())
        for limit in LIMIT_KEYS:
            if (value := getattr(values, limit)) is not None:
                where = "hatchway limits set" if limit in stored else "hatchway.yaml"
                table.add_row(scope if scope == "defaults" else f"{scope}.{name}", limit, f"{value:g}", where)
    console.print(table)
