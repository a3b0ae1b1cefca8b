"""One OAuth token fetch across replicas: two ``TokenCache``s (two gateways) on one shared cache.

The in-process cache stands in for one process with two gateways; Redis is the real deployment.
The end-to-end version with two ``hatchway serve`` processes is in tests/api/test_replica_processes.py.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from hatchway.credentials.oauth import AccessToken
from hatchway.credentials.tokens import TokenCache
from hatchway.store.cache import Cache

pytestmark = pytest.mark.anyio
WAITING = "another replica is fetching it"


async def until(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_the_second_replica_waits_for_the_first_ones_fetch_and_uses_its_token(
    shared: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hatchway.credentials.tokens")
    first, second = TokenCache(shared), TokenCache(shared)
    release = asyncio.Event()
    fetched: list[str] = []

    def fetcher(replica: str):  # type: ignore[no-untyped-def]
        async def fetch() -> AccessToken:
            fetched.append(replica)
            await release.wait()
            return AccessToken(f"token-from-{replica}", 3600)

        return fetch

    on_first = asyncio.create_task(first.get("org:server", fetcher("first"), org_id="org"))
    await until(lambda: fetched == ["first"])
    on_second = asyncio.create_task(second.get("org:server", fetcher("second"), org_id="org"))
    await until(lambda: WAITING in caplog.text)
    release.set()

    assert await on_first == await on_second == "token-from-first"
    assert fetched == ["first"]


@pytest.mark.redis
@pytest.mark.parametrize("shared", ["redis"], indirect=True)  # a lock that outlives its holder
async def test_a_fetch_lock_left_by_a_crashed_replica_delays_but_does_not_fail_the_call(
    shared: Cache, caplog: pytest.LogCaptureFixture
) -> None:
    from hatchway.store.redis_cache import RedisCache

    assert isinstance(shared, RedisCache)
    dead = shared.client.lock(f"{shared.prefix}lock:org:server:fetch", timeout=30)
    assert await dead.acquire(blocking=False)  # the replica that held it died before releasing

    async def fetch() -> AccessToken:
        return AccessToken("fetched-anyway", 3600)

    token = await TokenCache(shared, lock_seconds=0.5).get("org:server", fetch, org_id="org")

    assert token == "fetched-anyway"
    assert "not released in 0.5s; fetching" in caplog.text
