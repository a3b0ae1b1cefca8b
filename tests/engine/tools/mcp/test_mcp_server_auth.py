"""The headers VaultCredentials makes, as a real MCP server (official SDK) checking bearers sees them.

The MCP pool (another branch) owns connections, retries and the 401 → invalidate → retry path; here
the official SDK client stands in for it, so the credentials' side of that contract is pinned down.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError

from hatchway.engine.tools.mcp.auth import VaultCredentials
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_standin import Auth, Server, run_context
from tests.support.servers import ServerThread
from tests.support.token_endpoint import TokenEndpoint

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class BearerGate:
    """ASGI middleware in front of the MCP app: 401 unless the bearer is one the test accepts."""

    def __init__(self, app, accepted: set[str]) -> None:  # type: ignore[no-untyped-def]
        self.app = app
        self.accepted = accepted
        self.seen: list[str | None] = []

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        header = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else None
        self.seen.append(token)
        if token not in self.accepted:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
            return await send({"type": "http.response.body", "body": b""})
        return await self.app(scope, receive, send)


def _mcp_app():  # type: ignore[no-untyped-def]
    mcp = MCPServer("billing")

    @mcp.tool()
    def balance(account: str) -> str:
        """The balance of an account."""
        return f"{account}: 42.00"

    return mcp.streamable_http_app(stateless_http=True, json_response=True)


async def _call(url: str, headers: dict[str, str]) -> str:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool("balance", {"account": "acc-1"})
        return result.content[0].text  # type: ignore[union-attr]


async def test_an_oauth_token_opens_a_bearer_checking_mcp_server_and_a_revoked_one_is_replaced(
    secret_scanner: SecretScanner, tmp_path: Path
) -> None:
    tokens = TokenEndpoint(tmp_path).start()
    gate = BearerGate(_mcp_app(), accepted=set())
    mcp_server = ServerThread(gate).start()
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'v.db'}")
    try:
        await db.migrate()
        vault = Vault(db, MasterKey.generate("test"))
        org = (await OrgStore(db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id
        client_secret = f"cs-{uuid.uuid4().hex}"
        secret_scanner.watch(client_secret)
        await vault.put(org, "billing_client_secret", client_secret)
        server = Server(
            "billing",
            f"{mcp_server.url}/mcp",
            Auth("oauth", "secret.billing_client_secret", token_url=tokens.url, client_id="hatchway"),
        )
        creds = VaultCredentials(vault, MemoryCache(), verify=tokens.client_tls())
        ctx = run_context(org)

        headers = await creds.auth_headers(server, ctx, trusted=True)
        gate.accepted.add(tokens.issued[0])
        assert await _call(server.url, headers) == "acc-1: 42.00"
        assert gate.seen and all(t == tokens.issued[0] for t in gate.seen)

        gate.accepted.clear()  # the identity provider revoked the token: the server answers 401
        with pytest.raises(ExceptionGroup) as refused:
            await _call(server.url, headers)
        assert refused.group_contains(MCPError)
        await creds.invalidate(server, ctx)  # what the pool does on a 401, before its one retry
        fresh = await creds.auth_headers(server, ctx, trusted=True)
        gate.accepted.add(tokens.issued[1])
        assert await _call(server.url, fresh) == "acc-1: 42.00"
        assert len(tokens.requests) == 2 and None not in gate.seen
    finally:
        await db.close()
        mcp_server.stop()
        tokens.stop()
