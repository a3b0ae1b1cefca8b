"""The cache interface on Redis: shared by every replica when ``redis_url`` is set."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import redis.asyncio as redis
from redis.exceptions import LockError

from hatchway.store.cache import Cache

_PREFIX = "hatchway:"


class RedisCache(Cache):
    """JSON values with TTLs in Redis; locks are Redis locks with an expiry (a crashed holder frees them)."""

    def __init__(self, url: str, *, prefix: str = _PREFIX) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=False)
        self.prefix = prefix

    async def get(self, key: str) -> Any | None:
        raw = await self.client.get(self.prefix + key)
        return None if raw is None else orjson.loads(raw)

    async def set(self, key: str, value: Any, ttl_seconds: float) -> None:
        if ttl_seconds <= 0:
            return
        await self.client.set(self.prefix + key, orjson.dumps(value), px=max(int(ttl_seconds * 1000), 1))

    async def delete(self, key: str) -> None:
        await self.client.delete(self.prefix + key)

    @asynccontextmanager
    async def lock(
        self, name: str, *, hold_seconds: float = 30.0, on_wait: Callable[[], None] | None = None
    ) -> AsyncIterator[None]:
        key = f"{self.prefix}lock:{name}"
        lock = self.client.lock(key, timeout=hold_seconds, blocking_timeout=hold_seconds)
        if not await lock.acquire(blocking=False):
            if on_wait is not None:
                on_wait()
            if not await lock.acquire():
                raise TimeoutError(f"could not acquire the shared lock '{name}' within {hold_seconds}s")
        try:
            yield
        finally:
            try:
                await lock.release()
            except LockError:  # expired while held: another holder may already have it
                pass

    async def ping(self) -> None:
        await self.client.ping()

    async def close(self) -> None:
        await self.client.aclose()
