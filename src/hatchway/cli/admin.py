"""``hatchway orgs …`` and ``hatchway keys …``: organisations and API keys."""

from __future__ import annotations

import getpass
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from hatchway.access.administration import Actor, Administration, KeyChanges, key_summary
from hatchway.audit import AuditTrail
from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    as_json,
    console,
    err_console,
    examples,
    fail,
    run_async,
    settings_from,
)
from hatchway.errors import HatchwayError
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.limit_overrides import LimitOverrides
from hatchway.store.orgs import OrgStore
from hatchway.vault.master_key import load_master_key

T = TypeVar("T")

orgs_app = typer.Typer(help="Organisations: every key, secret and log belongs to one.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys: shown once, stored hashed.", no_args_is_help=True)
app.add_typer(orgs_app, name="orgs", rich_help_panel="Organisations and secrets")
app.add_typer(keys_app, name="keys", rich_help_panel="Organisations and secrets")


async def _with_orgs(config_path, action):  # type: ignore[no-untyped-def]
    settings = settings_from(config_path)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        return await action(OrgStore(db))
    finally:
        await db.close()


async def with_admin(config_path: Path, action: Callable[[Administration], Awaitable[T]]) -> T:
    """``action`` on the service the admin API uses, over hatchway.yaml's database and master key
    (every change it makes is in the audit trail, by ``cli:<user>``)."""
    settings = settings_from(config_path)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        orgs = OrgStore(db)
        trail = AuditTrail(db, load_master_key(settings.master_key_file), settings.audit)
        return await action(Administration(orgs, LimitOverrides(db), trail, settings.access))
    finally:
        await db.close()


def cli_actor() -> Actor:
    """The person at the terminal, as the audit trail names them: the CLI holds the database and the
    master key, so it acts as a platform admin. In a container run under a uid with no passwd entry
    (OpenShift's arbitrary uids) the user is named by the uid."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid-{os.getuid()}"
    return Actor(f"cli:{user}", Role.PLATFORM)


@orgs_app.command("create", epilog=examples("hatchway orgs create acme --config examples/hatchway.yaml"))
def orgs_create(
    name: Annotated[str, typer.Argument(help="Organisation name.")], config: ConfigOption = DEFAULT_CONFIG
) -> None:
    """Create an organisation."""
    org = run_async(lambda: with_admin(config, lambda admin: admin.create_org(cli_actor(), name)))
    console.print(f"created organisation [bold]{org.name}[/] ({org.id})")


@orgs_app.command("list", epilog=examples("hatchway orgs list --config examples/hatchway.yaml"))
def orgs_list(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """List organisations."""
    orgs = run_async(lambda: _with_orgs(config, lambda store: store.list_orgs()))
    table = Table("id", "name", "created")
    for org in orgs:
        table.add_row(org.id, org.name, org.created_at.isoformat(timespec="seconds"))
    console.print(table)


OrgOption = Annotated[str, typer.Option("--org", help="Organisation name or id.")]
RoleOption = Annotated[
    Role,
    typer.Option("--role", help="app (inference), viewer (read-only), admin, platform (every organisation)."),
]
ModelsOption = Annotated[
    list[str] | None, typer.Option("--allow-model", help="Restrict the key to this model (repeatable).")
]
EndpointsOption = Annotated[
    list[str] | None,
    typer.Option("--allow-endpoint", help="Restrict the key to this MCP endpoint (repeatable)."),
]
ExpiresOption = Annotated[
    str | None, typer.Option("--expires", help="Expiry: an ISO time (2027-01-01T00:00:00Z) or 30d / 12h.")
]
DescriptionOption = Annotated[str | None, typer.Option("--description", help="What the key is for.")]


def _expiry(value: str | None) -> datetime | None:
    if value is None:
        return None
    units = {"d": 86_400, "h": 3600, "m": 60}
    if value[-1:] in units and value[:-1].isdigit():
        return datetime.now(UTC) + timedelta(seconds=int(value[:-1]) * units[value[-1]])
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise fail(f"--expires: an ISO time or a duration such as 30d (got {value!r})", 2) from None
    if when.tzinfo is None:
        raise fail("--expires: give a time zone (e.g. 2027-01-01T00:00:00Z)", 2)
    return when


def _run_admin(config: Path, action: Callable[[Administration], Awaitable[T]]) -> T:
    try:
        return run_async(lambda: with_admin(config, action))
    except HatchwayError as exc:
        raise fail(exc.message) from None


@keys_app.command(
    "create",
    epilog=examples(
        "KEY=$(hatchway keys create --org acme --name web-app --config examples/hatchway.yaml)",
        "hatchway keys create --org acme --name ops --role admin --expires 90d",
        "hatchway keys create --org acme --name bot --allow-model gpt-4o --allow-model agent:contas",
    ),
)
def keys_create(
    org: OrgOption,
    name: Annotated[str, typer.Option("--name", help="A label for the key.")] = "default",
    role: RoleOption = Role.APP,
    allow_model: ModelsOption = None,
    allow_endpoint: EndpointsOption = None,
    expires: ExpiresOption = None,
    description: DescriptionOption = None,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Create an API key and print only the key (it is not shown again). An app key by default."""
    changes = KeyChanges(
        name=name,
        role=role,
        description=description,
        allowed_models=allow_model or None,
        allowed_mcp_endpoints=allow_endpoint or None,
        expires_at=_expiry(expires),
    )

    async def create(admin: Administration) -> str:
        found = await admin.orgs.get_org(org)
        return (await admin.create_key(cli_actor(), found.id, changes))[1]

    typer.echo(_run_admin(config, create))


@keys_app.command("list", epilog=examples("hatchway keys list --org acme --config examples/hatchway.yaml"))
def keys_list(
    org: OrgOption,
    include_revoked: Annotated[bool, typer.Option("--include-revoked", help="Also revoked keys.")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="A JSON array instead of a table.")] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """List an organisation's keys: role, restrictions, expiry (never a key)."""

    async def keys(admin: Administration) -> list[dict[str, Any]]:
        found = await admin.orgs.get_org(org)
        return [key_summary(k) for k in await admin.orgs.list_keys(found.id, include_revoked=include_revoked)]

    rows = _run_admin(config, keys)
    if json_output:
        typer.echo(as_json(rows))
        return
    table = Table("id", "name", "role", "prefix", "restricted to", "expires", "revoked")
    for row in rows:
        restricted = ", ".join([*(row["allowed_models"] or []), *(row["allowed_mcp_endpoints"] or [])])
        table.add_row(
            row["id"],
            row["name"],
            row["role"],
            row["prefix"],
            restricted or "-",
            row["expires_at"] or "-",
            row["revoked_at"] or "-",
        )
    console.print(table)


@keys_app.command("rotate", epilog=examples("NEW=$(hatchway keys rotate key_01… --org acme)"))
def keys_rotate(
    key: Annotated[str, typer.Argument(help="The key's id (or name).")],
    org: OrgOption,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Print a new key with the old one's role and restrictions.

    The old key keeps working for ``access.key_rotation_grace_seconds`` (default 24 h).
    """

    async def rotate(admin: Administration) -> tuple[str, datetime | None]:
        found = await admin.orgs.get_org(org)
        _new, plaintext, old = await admin.rotate_key(cli_actor(), found.id, key)
        return plaintext, old.expires_at

    plaintext, ends = _run_admin(config, rotate)
    typer.echo(plaintext)
    err_console.print(f"the old key works until {ends.isoformat() if ends else 'revoked'}")


@keys_app.command("revoke", epilog=examples("hatchway keys revoke key_01… --org acme"))
def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key's id (or name).")],
    org: OrgOption,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Revoke a key: every replica refuses it within 10 s (its key cache)."""

    async def revoke(admin: Administration) -> str:
        found = await admin.orgs.get_org(org)
        return (await admin.revoke_key(cli_actor(), found.id, key)).id

    console.print(f"revoked {_run_admin(config, revoke)}")
