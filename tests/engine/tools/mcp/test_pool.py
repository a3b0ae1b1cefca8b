"""The MCP session pool's bounds, against real SDK servers: least recently used sessions close past the
per-organisation and total bounds, idle ones expire, and a session in use is never swept."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hatchway.engine.tools.mcp.pool import McpServerPool, PoolBounds
from tests.support.mcp_servers import McpTestServer
from tests.support.server_configs import server

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_sessions_past_the_organisations_bound_close_least_recently_used_first(
    mcp_server_factory: Callable[..., McpTestServer],
) -> None:
    mcp = mcp_server_factory("s")
    pool = McpServerPool(bounds=PoolBounds(max_sessions=10, max_sessions_per_org=2))
    try:
        a, b, c = (server("s", f"{mcp.url}?n={n}") for n in range(3))
        first = await pool.connection(a, "org_1", trusted=False)
        await pool.connection(b, "org_1", trusted=False)
        await pool.connection(a, "org_1", trusted=False)  # a used again: b is now the oldest
        await pool.connection(server("s", f"{mcp.url}?other"), "org_2", trusted=False)  # not org_1's budget
        await pool.connection(c, "org_1", trusted=False)

        assert len(pool) == 3 and not first.lost.is_set()
        assert (await pool.connection(a, "org_1", trusted=False)) is first  # a kept, b closed
    finally:
        await pool.aclose()


async def test_idle_sessions_expire_but_not_one_in_use(
    mcp_server_factory: Callable[..., McpTestServer],
) -> None:
    mcp = mcp_server_factory("s")
    clock = Clock()
    pool = McpServerPool(bounds=PoolBounds(idle_seconds_untrusted=60, idle_seconds_trusted=600), clock=clock)
    try:
        inline = await pool.connection(server("s", f"{mcp.url}?inline"), "org_1", trusted=False)
        pool.release(inline)
        trusted = await pool.connection(server("s", mcp.url), "org_1", trusted=True)
        pool.release(trusted)
        busy = await pool.connection(server("s", f"{mcp.url}?busy"), "org_1", trusted=False)  # not released

        clock.now += 61
        assert await pool.expire_idle() == 1  # the idle inline one; trusted has 10 minutes, busy is busy
        assert inline.lost.is_set() and len(pool) == 2
        clock.now += 600
        pool.release(busy)
        assert await pool.expire_idle() == 1  # the trusted one; busy was just released
        assert len(pool) == 1
    finally:
        await pool.aclose()


async def test_listings_are_bounded_like_the_sessions() -> None:
    """One listing per (organisation, end user, server) for per-user servers: a hostile key rotating
    X-On-Behalf-Of values must not grow the pool's memory without bound."""
    pool = McpServerPool(bounds=PoolBounds(max_sessions=2, max_sessions_per_org=2))
    per_user = server("tickets", "https://mcp.example.com/mcp", type="oauth", grant="authorization_code")
    first = pool.listing(per_user, "org_1", trusted=True, user="user-0")
    for n in range(1, 50):
        pool.listing(per_user, "org_1", trusted=True, user=f"user-{n}")
    assert pool.listing(per_user, "org_1", trusted=True, user="user-49") is pool.listing(
        per_user, "org_1", trusted=True, user="user-49"
    )
    assert pool.listing(per_user, "org_1", trusted=True, user="user-0") is not first  # the oldest went
    assert len(pool._listings) <= 4
    await pool.aclose()
