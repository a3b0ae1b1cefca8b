"""The plugin's MCP client with the vault's credentials: a real TLS token endpoint, an MCP server
built with the official SDK that verifies the tokens, and the pool's retry rules around them."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hatchway.config.plugin import PluginConfig, parse_plugin
from hatchway.credentials import VaultCredentials
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import McpAuthError
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_servers import McpTestServer
from tests.support.server_configs import run_context
from tests.support.token_endpoint import Clock, IssuedTokens, TokenEndpoint

pytestmark = pytest.mark.anyio


@dataclass
class Bench:
    idp: TokenEndpoint
    billing: McpTestServer
    vault: Vault
    org: str
    clock: Clock

    def plugin(self, **server: Any) -> PluginConfig:
        entry = {
            "id": "billing",
            "url": self.billing.url,
            "auth": {
                "type": "oauth",
                "token_url": self.idp.url,
                "client_id": "hatchway",
                "secret_ref": "secret.billing_client_secret",
            },
            "max_retries": 3,
            **server,
        }
        return parse_plugin(json.dumps({"version": "1", "mcp_servers": [entry]}), "test plugin")

    def client(self, plugin: PluginConfig, pool: McpServerPool, credentials: Any = None) -> PluginMcpClient:
        credentials = credentials or VaultCredentials(
            self.vault, MemoryCache(), clock=self.clock, verify=self.idp.client_tls()
        )
        return PluginMcpClient(plugin, trusted=True, pool=pool, credentials=credentials, backoff_seconds=0.01)

    def ctx(self) -> RunContext:
        return run_context(self.org)


@pytest.fixture
async def bench(
    secret_scanner: SecretScanner,
    tmp_path: Path,
    mcp_server_factory: Callable[..., McpTestServer],
    sqlite_db: Database,
) -> AsyncIterator[Bench]:
    idp = TokenEndpoint(tmp_path).start()
    billing = mcp_server_factory("billing", token_verifier=IssuedTokens(idp))
    vault = Vault(sqlite_db, MasterKey.generate("test"))
    org = (await OrgStore(sqlite_db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id
    client_secret = f"cs-{uuid.uuid4().hex}"
    secret_scanner.watch(client_secret)
    await vault.put(org, "billing_client_secret", client_secret)
    yield Bench(idp, billing, vault, org, Clock())
    idp.stop()
    secret_scanner.watch(*idp.issued)


async def test_a_failing_token_endpoint_is_asked_once_per_call_and_never_retried(
    bench: Bench, pool: McpServerPool
) -> None:
    bench.idp.behaviour = "status_500"
    plugin = bench.plugin()
    [server] = plugin.mcp_servers

    outcome = await bench.client(plugin, pool).call(server, "echo", {"text": "x"}, bench.ctx())

    assert isinstance(outcome.error, McpAuthError) and outcome.error.code == "oauth_failed"
    assert outcome.retries == 0 and len(bench.idp.requests) == 1
    assert bench.billing.requests == []


class TransientlyFailingCredentials:
    """Credentials whose failure claims to be transient: the pool must still not retry it."""

    def __init__(self) -> None:
        self.asked = 0

    async def authorize(self, server: Any, who: Any, *, trusted: bool) -> None:
        return None

    async def auth_headers(self, server: Any, who: Any, *, trusted: bool) -> dict[str, str]:
        self.asked += 1
        raise McpAuthError("the identity provider is down", code="oauth_unreachable", transient=True)

    async def invalidate(self, server: Any, who: Any, *, refused: Any = None) -> None:
        return None


async def test_a_credential_failure_is_never_retried_even_if_marked_transient(
    bench: Bench, pool: McpServerPool
) -> None:
    plugin = bench.plugin()
    credentials = TransientlyFailingCredentials()

    outcome = await bench.client(plugin, pool, credentials).call(
        plugin.mcp_servers[0], "echo", {"text": "x"}, bench.ctx()
    )

    assert isinstance(outcome.error, McpAuthError) and outcome.retries == 0
    assert credentials.asked == 1 and bench.billing.requests == []


async def test_tools_stay_listed_when_listing_again_fails_for_want_of_a_token(bench: Bench) -> None:
    pool = McpServerPool(tools_ttl_seconds=0)  # every listing goes to the server
    plugin = bench.plugin()
    [server] = plugin.mcp_servers
    mcp = bench.client(plugin, pool)
    try:
        listed = {t.name for t in await mcp.list_tools(server, bench.ctx())}
        bench.clock.now += 3600  # the token is due; the token endpoint is down
        bench.idp.behaviour = "status_500"
        seen = len(bench.billing.requests)

        again = {t.name for t in await mcp.list_tools(server, bench.ctx())}
        outcome = await mcp.call(server, "echo", {"text": "x"}, bench.ctx())
    finally:
        await pool.aclose()

    assert again == listed and "echo" in listed
    assert isinstance(outcome.error, McpAuthError) and "answered HTTP 500" in outcome.error.message
    assert bench.billing.requests[seen:] == []


async def test_sse_a_revoked_token_is_replaced_on_a_new_session(
    bench: Bench, pool: McpServerPool, mcp_server_factory: Callable[..., McpTestServer]
) -> None:
    # On SSE a refused POST stops the SDK's writer, so the session must be replaced for the retry.
    sse = mcp_server_factory("billing-sse", transport="sse", token_verifier=IssuedTokens(bench.idp))
    plugin = bench.plugin(url=sse.url, transport="sse")
    [server] = plugin.mcp_servers
    mcp = bench.client(plugin, pool)
    first = await mcp.call(server, "echo", {"text": "one"}, bench.ctx())
    bench.idp.revoke_all()

    second = await mcp.call(server, "echo", {"text": "two"}, bench.ctx())

    assert first.result is not None and second.result is not None
    assert second.result.text == "echo:two" and second.retries == 0
    assert len(bench.idp.issued) == 2
    refused = [r for r in sse.requests if r.answered == 401]
    assert [r.headers["authorization"] for r in refused] == [f"Bearer {bench.idp.issued[0]}"]
    assert None not in sse.bearers()
