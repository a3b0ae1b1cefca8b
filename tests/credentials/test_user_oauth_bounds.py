"""A per-user OAuth flow reads what servers send it no further than 64 KiB: a resource whose 401
points at a metadata document of any size fails the call with a readable error, not the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hatchway.cli.probe_session import GivenSecrets, ProbeGrants, probe_context, probe_server
from hatchway.credentials import VaultCredentials
from hatchway.credentials.consent import HeadlessConsent
from hatchway.errors import ToolError
from hatchway.store.cache import MemoryCache
from tests.support.server_configs import server
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio


class Endless:
    def __init__(self) -> None:
        self.sent = 0
        self.requests = 0

    async def chunks(self):  # type: ignore[no-untyped-def]
        self.requests += 1
        yield b'{"resource": "'
        for _ in range(64 * 1024):  # 1 GiB if anyone read it all
            self.sent += 16 * 1024
            yield b"a" * (16 * 1024)


@pytest.fixture
def hostile() -> Iterator[tuple[ServerThread, Endless]]:
    endless = Endless()

    async def mcp(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
        return JSONResponse(
            {"error": "unauthorized"}, status_code=401, headers={"www-authenticate": challenge}
        )

    async def metadata(request: Request) -> Response:
        return StreamingResponse(endless.chunks(), media_type="application/json")

    app = Starlette(
        routes=[
            Route("/mcp", mcp, methods=["POST", "GET"]),
            Route("/.well-known/oauth-protected-resource/mcp", metadata),
        ]
    )
    thread = ServerThread(app, timeout_graceful_shutdown=1).start()
    yield thread, endless
    thread.stop()


async def test_an_endless_metadata_document_is_cut_and_the_call_fails_readably(
    hostile: tuple[ServerThread, Endless],
) -> None:
    thread, endless = hostile
    entry = server("hostile", f"{thread.url}/mcp", type="oauth", grant="authorization_code")
    redirect = "http://127.0.0.1:9/callback"
    grants = ProbeGrants(HeadlessConsent(redirect_uri=redirect), redirect_uri=redirect)
    credentials = VaultCredentials(
        GivenSecrets({}), MemoryCache(), allow_private_hosts=True, user_grants=grants
    )
    with pytest.raises(ToolError) as failed:
        await probe_server(entry, credentials, probe_context(timeout=20))
    assert "65536 bytes" in failed.value.message, failed.value.message
    assert endless.requests == 1  # refused, not asked again
