"""Two replicas refreshing one end user's rotating refresh token at once: one refreshes, the other
waits for it under the shared lock and reloads, so neither fails and the user is not asked again.

Real parts: the Authlib authorization server (refresh tokens are single use), an SDK MCP resource
server, one database and one shared cache (Redis when configured, else one in-process cache as
the stand-in), and two independent sets of the gateway's MCP client objects (pools, grant services).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.credentials import VaultCredentials
from hatchway.credentials.grants import UserGrantService
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import AuthorizationRequired
from hatchway.principal import Principal
from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import Vault, load_master_key
from tests.support.oauth_server import AuthorizedMcpServer, OAuthTestServer

pytestmark = pytest.mark.anyio
PUBLIC = "http://127.0.0.1:9"  # the consent links are never opened by a browser here


@pytest.fixture
def servers() -> Iterator[tuple[OAuthTestServer, AuthorizedMcpServer]]:
    idp = OAuthTestServer(users={"dave": "pw-dave"}, redirect_uri=f"{PUBLIC}/oauth/callback", access_ttl=30)
    idp.start()
    mcp = AuthorizedMcpServer(idp).start()
    yield idp, mcp
    mcp.stop()
    idp.stop()


async def test_two_replicas_refresh_one_users_token_without_asking_the_user_again(
    servers: tuple[OAuthTestServer, AuthorizedMcpServer], shared: Cache, tmp_path: Path
) -> None:
    idp, mcp = servers
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}")
    await db.migrate()
    vault = Vault(db, load_master_key(tmp_path / "master.key"))
    org = await OrgStore(db).create_org("acme")
    await vault.put(org.id, "idp_client", idp.client.client_secret, [])
    server = McpServerConfig.model_validate(
        {
            "id": "tickets",
            "url": mcp.url,
            "auth": {
                "type": "oauth",
                "grant": "authorization_code",
                "client_id": idp.client.client_id,
                "secret_ref": "secret.idp_client",
            },
        }
    )
    plugin = PluginConfig(version="1", mcp_servers=[server])

    def replica() -> tuple[UserGrantService, PluginMcpClient, McpServerPool]:
        grants = UserGrantService(db, vault, public_base_url=PUBLIC, cache=shared)
        credentials = VaultCredentials(vault, MemoryCache(), allow_private_hosts=True, user_grants=grants)
        pool = McpServerPool()
        return grants, PluginMcpClient(plugin, trusted=True, pool=pool, credentials=credentials), pool

    def ctx() -> RunContext:
        principal = Principal(org_id=org.id, org_name=org.name)
        return RunContext.from_headers(principal, {"x-on-behalf-of": "dave"}, deadline_seconds=30)

    (grants_a, client_a, pool_a), (_, client_b, pool_b) = replica(), replica()
    try:
        # Dave authorizes once (what /oauth/connect and /oauth/callback do, without the browser).
        with pytest.raises(AuthorizationRequired) as needed:
            await client_a.list_tools(server, ctx())
        consent_id = needed.value.link.rsplit("/", 1)[1]
        authorize = await grants_a.authorization_url(consent_id)
        assert authorize is not None
        async with httpx.AsyncClient() as http:
            query = authorize.split("?", 1)[1]
            answer = await http.post(
                f"{idp.issuer}/authorize?{query}",
                data={"username": "dave", "password": "pw-dave", "consent": "allow"},
            )
        assert answer.status_code == 302
        redirect = httpx.URL(answer.headers["location"])
        accepted = await grants_a.accept_callback(
            redirect.params["state"], redirect.params["code"], redirect.params.get("iss")
        )
        assert accepted is not None
        await client_a.list_tools(server, ctx())  # redeems the code; the grant is stored

        # Tokens live 30 s, inside the 60 s refresh margin: both replicas' calls must refresh.
        refreshes = idp.store.refreshes
        idp.refresh_delay = 0.3  # both replicas' refreshes would overlap at the token endpoint
        outcomes = await asyncio.gather(
            client_a.call(server, "whoami", {}, ctx()), client_b.call(server, "whoami", {}, ctx())
        )
        assert [o.error for o in outcomes] == [None, None]
        assert [o.result.text for o in outcomes if o.result] == ["user:dave", "user:dave"]
        # Every request refreshed (each token is born inside the margin), one at a time, each with
        # the newest refresh token: none was refused.
        assert idp.store.refreshes >= refreshes + 2
    finally:
        await pool_a.aclose()
        await pool_b.aclose()
        await db.close()
