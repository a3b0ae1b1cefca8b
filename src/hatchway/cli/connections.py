"""``hatchway connections …``: the end users' per-user OAuth connections to MCP servers.

What ``GET/DELETE /v1/connections`` shows an end user, for the operator: which servers a user has
authorized, the scopes and when the access token expires; never a token.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from hatchway.cli.program import DEFAULT_CONFIG, ConfigOption, app, console, examples, fail, run_async
from hatchway.cli.secrets import OrgOption, _with_vault
from hatchway.store.orgs import OrgStore
from hatchway.vault import Vault

connections_app = typer.Typer(
    help="End users' OAuth connections to MCP servers (grant: authorization_code).", no_args_is_help=True
)
app.add_typer(connections_app, name="connections", rich_help_panel="Organisations and secrets")
UserOption = Annotated[str, typer.Option("--user", help="The end user (their X-On-Behalf-Of).")]


def _grants(vault: Vault):  # type: ignore[no-untyped-def]
    from hatchway.credentials.grants import UserGrantService

    # Listing and revoking need no links: any base URL will do.
    return UserGrantService(vault.db, vault, public_base_url="http://127.0.0.1")


@connections_app.command("list", epilog=examples("hatchway connections list --org acme --user alice"))
def connections_list(org: OrgOption, user: UserOption, config: ConfigOption = DEFAULT_CONFIG) -> None:
    """List the servers USER has connected: scopes and expiry (never a token)."""

    async def action(vault: Vault, orgs: OrgStore):  # type: ignore[no-untyped-def]
        return await _grants(vault).connections((await orgs.get_org(org)).id, user)

    found = run_async(lambda: _with_vault(config, action))
    table = Table("server", "url", "scopes", "access token expires", "connected")
    for c in found:
        expires = f"{c.expires_at:%Y-%m-%d %H:%M:%S}Z" if c.expires_at else "-"
        table.add_row(
            c.server, c.server_url, " ".join(c.scopes) or "-", expires, f"{c.connected_at:%Y-%m-%d %H:%M}Z"
        )
    console.print(table)


@connections_app.command(
    "revoke", epilog=examples("hatchway connections revoke tickets --org acme --user alice")
)
def connections_revoke(
    server: Annotated[str, typer.Argument(help="The server id (in the plugin).")],
    org: OrgOption,
    user: UserOption,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Forget USER's grant of SERVER: their next call asks them to connect again."""

    async def action(vault: Vault, orgs: OrgStore) -> int:
        return await _grants(vault).revoke((await orgs.get_org(org)).id, user, server)

    if not run_async(lambda: _with_vault(config, action)):
        raise fail(f"{user} has no connection to {server} in {org}")
    console.print(f"revoked {user}'s connection to [bold]{server}[/] in {org}", highlight=False)
