"""``hatchway orgs …`` and ``hatchway keys …``: organisations and API keys."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    console,
    examples,
    run_async,
    settings_from,
)
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore

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


@orgs_app.command("create", epilog=examples("hatchway orgs create acme --config examples/hatchway.yaml"))
def orgs_create(
    name: Annotated[str, typer.Argument(help="Organisation name.")], config: ConfigOption = DEFAULT_CONFIG
) -> None:
    """Create an organisation."""
    org = run_async(lambda: _with_orgs(config, lambda store: store.create_org(name)))
    console.print(f"created organisation [bold]{org.name}[/] ({org.id})")


@orgs_app.command("list", epilog=examples("hatchway orgs list --config examples/hatchway.yaml"))
def orgs_list(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """List organisations."""
    orgs = run_async(lambda: _with_orgs(config, lambda store: store.list_orgs()))
    table = Table("id", "name", "created")
    for org in orgs:
        table.add_row(org.id, org.name, org.created_at.isoformat(timespec="seconds"))
    console.print(table)


@keys_app.command(
    "create",
    epilog=examples("KEY=$(hatchway keys create --org acme --name web-app --config examples/hatchway.yaml)"),
)
def keys_create(
    org: Annotated[str, typer.Option("--org", help="Organisation name or id.")],
    name: Annotated[str, typer.Option("--name", help="A label for the key.")] = "default",
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Create an API key and print only the key (it is not shown again)."""
    _, plaintext = run_async(lambda: _with_orgs(config, lambda store: store.create_key(org, name)))
    typer.echo(plaintext)
