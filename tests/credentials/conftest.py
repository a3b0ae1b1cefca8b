"""What the MCP auth tests share: one cache for two "replicas" (in process, and Redis when configured)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from hatchway.store.cache import Cache, MemoryCache
from tests.support.backends import REDIS_URL


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[Cache]:
    if request.param == "memory":
        yield MemoryCache()
        return
    if not REDIS_URL:
        pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
    from hatchway.store.redis_cache import RedisCache

    cache = RedisCache(REDIS_URL, prefix=f"hatchway-test:{uuid.uuid4().hex}:")
    yield cache
    keys = [k async for k in cache.client.scan_iter(match=f"{cache.prefix}*", count=1000)]
    if keys:
        await cache.client.delete(*keys)
    await cache.close()
