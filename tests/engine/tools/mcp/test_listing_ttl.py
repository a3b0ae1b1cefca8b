"""A tool listing lives the gateway's ``tools_ttl_seconds``, or less when a 2026-07-28 server
promises less (``ttlMs``), against real SDK servers; a ``ttlMs`` of 0 (the SDKs' default for a
server that chose nothing) keeps the gateway's own TTL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp.server import MCPServer
from mcp.server.caching import CacheHint

from hatchway.engine.tools.mcp.http import request_scope
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.store.cache import MemoryCache
from tests.support.server_configs import server
from tests.support.servers import ServerThread
from tests.support.token_endpoint import Clock

pytestmark = pytest.mark.anyio


def _serve(ttl_ms: int | None) -> ServerThread:
    hints = {"tools/list": CacheHint(ttl_ms=ttl_ms)} if ttl_ms is not None else None
    mcp = MCPServer("listed", log_level="WARNING", cache_hints=hints)

    @mcp.tool()
    def ping() -> str:
        return "pong"

    return ServerThread(mcp.streamable_http_app(), timeout_graceful_shutdown=1).start()


@pytest.fixture
def servers() -> Iterator[dict[str, ServerThread]]:
    running = {"sixty": _serve(60_000), "zero": _serve(0)}
    yield running
    for thread in running.values():
        thread.stop()


async def test_a_listing_lives_no_longer_than_the_server_promises(servers: dict[str, ServerThread]) -> None:
    clock = Clock()
    pool = McpServerPool(tools_ttl_seconds=300, cache=MemoryCache(clock=clock))
    try:
        listings = {}
        for name, thread in servers.items():
            entry = server(name, f"{thread.url}/mcp")
            connection = await pool.connection(entry, "org_1", trusted=True)
            with request_scope({}) as scope:
                assert [t.name for t in await connection.tools(scope)] == ["ping"]
            pool.release(connection)
            listings[name] = pool.listing(entry, "org_1", trusted=True)

        clock.now += 59
        assert await listings["sixty"].fresh() is not None
        clock.now += 2  # 61 s: past the server's 60 s, well within the gateway's 300 s
        assert await listings["sixty"].fresh() is None
        assert await listings["zero"].fresh() is not None
        clock.now += 240  # 301 s: past the gateway's own TTL too
        assert await listings["zero"].fresh() is None
    finally:
        await pool.aclose()
