"""The cache interface behaves the same in process and on Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from hatchway.store.cache import Cache, MemoryCache
from tests.support.backends import REDIS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def cache(request: pytest.FixtureRequest):
    if request.param == "memory":
        yield MemoryCache()
        return
    if not REDIS_URL:
        pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
    from hatchway.store.redis_cache import RedisCache

    redis_cache = RedisCache(REDIS_URL, prefix=f"hatchway-test:{uuid.uuid4().hex}:")
    yield redis_cache
    await redis_cache.close()


async def test_values_round_trip_and_expire(cache: Cache) -> None:
    await cache.set("k", {"a": [1, 2]}, ttl_seconds=0.2)
    assert await cache.get("k") == {"a": [1, 2]}
    await cache.set("zero", 1, ttl_seconds=0)
    assert await cache.get("zero") is None
    async with asyncio.timeout(5):
        while await cache.get("k") is not None:
            await asyncio.sleep(0.05)
    await cache.set("d", "x", ttl_seconds=10)
    await cache.delete("d")
    assert await cache.get("d") is None


async def test_lock_is_exclusive(cache: Cache) -> None:
    inside = 0
    most = 0

    async def worker() -> None:
        nonlocal inside, most
        async with cache.lock("one", hold_seconds=5):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.02)
            inside -= 1

    await asyncio.gather(*(worker() for _ in range(5)))
    assert most == 1
    await cache.ping()


async def test_the_memory_cache_is_bounded_by_bytes_least_recently_used_first() -> None:
    cache = MemoryCache(max_bytes=3_000)
    for name in ("a", "b", "c"):
        await cache.set(name, "x" * 900, 60)
    assert await cache.get("a") is not None  # a is now the most recently used
    await cache.set("d", "y" * 900, 60)  # 4 × ~900 bytes do not fit: b, the least recently used, goes

    assert [await cache.get(k) is not None for k in "abcd"] == [True, False, True, True]
    assert cache.size_bytes <= 3_000
    await cache.set("huge", "z" * 5_000, 60)  # larger than the whole bound: not kept, nothing evicted
    assert await cache.get("huge") is None and await cache.get("d") is not None
    await cache.set("d", "short", 60)  # replacing a value frees its old bytes
    assert cache.size_bytes < 2_000
