"""``hatchway secrets …`` and ``hatchway vault rotate-master-key``.

A secret's value is read from standard input (or typed at a hidden prompt), never from the command
line, where it would end up in shell history and in the process list.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from hatchway.audit import AuditEvent, AuditTrail
from hatchway.cli.admin import cli_actor
from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    console,
    err_console,
    examples,
    fail,
    run_async,
    settings_from,
)
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import Vault, load_master_key, rotate_master_key
from hatchway.vault.rotation import current_and_new_keys

T = TypeVar("T")

secrets_app = typer.Typer(help="Secrets of an organisation, encrypted at rest.", no_args_is_help=True)
vault_app = typer.Typer(help="The vault's master key.", no_args_is_help=True)
app.add_typer(secrets_app, name="secrets", rich_help_panel="Organisations and secrets")
app.add_typer(vault_app, name="vault", rich_help_panel="Organisations and secrets")

OrgOption = Annotated[str, typer.Option("--org", help="Organisation name or id.")]


async def _with_vault(config: Path, action: Callable[[Vault, OrgStore], Awaitable[T]]) -> T:
    settings = settings_from(config)
    vault = Vault(Database(settings.database_url), load_master_key(settings.master_key_file))
    try:
        await vault.db.migrate()
        return await action(vault, OrgStore(vault.db))
    finally:
        await vault.db.close()


async def _audit(
    vault: Vault, config: Path, org_id: str, action: str, target: str, detail: dict[str, Any]
) -> None:
    """A change made here, in the organisation's audit trail (by ``cli:<user>``, as ``keys`` records)."""
    trail = AuditTrail(vault.db, vault.master_key, settings_from(config).audit)
    actor = cli_actor()
    await trail.record(
        AuditEvent(org_id=org_id, actor=actor.name, action=action, target=target, detail=detail)
    )


def read_value() -> str:
    """The secret from stdin (one trailing newline dropped) or a hidden prompt on a terminal."""
    if sys.stdin.isatty():
        value = typer.prompt("value", hide_input=True, prompt_suffix=": ")
    else:
        value = sys.stdin.read()
        value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise fail('the secret value is empty: pipe it on stdin, e.g. `printf %s "$KEY" | hatchway …`')
    return value


@secrets_app.command(
    "set",
    epilog=examples(
        'printf %s "$SEARCH_KEY" | hatchway secrets set mcp_search_api_key --org acme',
        'printf %s "$KEY" | hatchway secrets set search_key --org acme --allowed-host mcp.example.com',
        "hatchway secrets set openai_key --org system    (a hidden prompt asks for the value)",
    ),
)
def secrets_set(
    name: Annotated[str, typer.Argument(help="Secret name: letters, digits, '_' and '-', up to 64.")],
    org: OrgOption,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option("--allowed-host", help="Host a plugin sent in a request may send it to (repeatable)."),
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Create or replace a secret; the value is read from stdin."""
    value = read_value()

    async def action(vault: Vault, orgs: OrgStore) -> bool:
        org_row = await orgs.get_org(org)
        _, created = await vault.put(org_row.id, name, value, allowed_host or [])
        detail = {"created": created, "allowed_hosts": allowed_host or []}  # never the value
        await _audit(vault, config, org_row.id, "secret.put", f"secret:{name}", detail)
        return created

    created = run_async(lambda: _with_vault(config, action))
    console.print(f"{'created' if created else 'updated'} secret [bold]{name}[/] in {org}", highlight=False)


@secrets_app.command("list", epilog=examples("hatchway secrets list --org acme"))
def secrets_list(org: OrgOption, config: ConfigOption = DEFAULT_CONFIG) -> None:
    """List secret names, times and allowed hosts (never values)."""

    async def action(vault: Vault, orgs: OrgStore):  # type: ignore[no-untyped-def]
        return await vault.list_secrets((await orgs.get_org(org)).id)

    infos = run_async(lambda: _with_vault(config, action))
    table = Table("name", "allowed_hosts", "created", "updated")
    for info in infos:
        table.add_row(
            info.name,
            ", ".join(info.allowed_hosts) or "-",
            f"{info.created_at:%Y-%m-%d %H:%M:%S}Z",
            f"{info.updated_at:%Y-%m-%d %H:%M:%S}Z",
        )
    console.print(table)


@secrets_app.command("delete", epilog=examples("hatchway secrets delete mcp_search_api_key --org acme"))
def secrets_delete(
    name: Annotated[str, typer.Argument(help="Secret name.")],
    org: OrgOption,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Delete a secret."""

    async def action(vault: Vault, orgs: OrgStore) -> None:
        org_id = (await orgs.get_org(org)).id
        await vault.delete(org_id, name)
        await _audit(vault, config, org_id, "secret.delete", f"secret:{name}", {})

    run_async(lambda: _with_vault(config, action))
    console.print(f"deleted secret [bold]{name}[/] from {org}", highlight=False)


@vault_app.command(
    "rotate-master-key",
    epilog=examples(
        "hatchway vault rotate-master-key --config hatchway.yaml    (the old key is kept as <file>.old)",
        "HATCHWAY_NEW_MASTER_KEY=… hatchway vault rotate-master-key    (key from HATCHWAY_MASTER_KEY)",
    ),
)
def vault_rotate(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Re-wrap every organisation's data key under a new master key. Stop every gateway first.

    Interrupted? Run it again: it finishes with the same new key.
    """
    settings = settings_from(config)
    key_file = Path(settings.master_key_file)

    async def action(vault: Vault, _: OrgStore):  # type: ignore[no-untyped-def]
        current, new = current_and_new_keys(key_file, os.environ)  # the same pair the rotation uses
        rotated = await rotate_master_key(vault, key_file, os.environ)
        # The audit trail's signatures follow the key (audit/trail.py, AuditTrail.resign).
        return rotated, await AuditTrail(vault.db, current, settings.audit).resign(new)

    with err_console.status("Re-wrapping every organisation's data key under a new master key…"):
        result, audit = run_async(lambda: _with_vault(config, action))
    console.print(
        f"re-signed {audit.resigned} audit head(s) and checkpoint(s) with the new key", highlight=False
    )
    for org_id in audit.refused:
        err_console.print(
            f"[bold red]warning:[/] the audit trail of {org_id} does not verify and was not re-signed: "
            f"run `hatchway audit verify --org {org_id}`",
            highlight=False,
        )
    console.print(
        f"re-wrapped {result.rewrapped} data key(s): master key {result.old_key_id} → {result.new_key_id}",
        highlight=False,
    )
    if result.key_file is not None:
        console.print(f"new key in {result.key_file}; the previous one is kept in {result.backup_file}")
    else:
        console.print(
            "now set HATCHWAY_MASTER_KEY (or the file HATCHWAY_MASTER_KEY_FILE names) to the value of "
            "HATCHWAY_NEW_MASTER_KEY (or its file) and restart",
            highlight=False,
        )
