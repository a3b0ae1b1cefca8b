"""The one cache interface: in-process by default, Redis when ``redis_url`` is set (scale-out issue).

Values are JSON-serialisable. Anything that must be shared across replicas (tool results, listed
tools, OAuth tokens) goes through here, never through a module-level dict.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson


class Cache(ABC):
    """A TTL key-value cache of JSON values."""

    @abstractmethod
    async def get(self, key: str) -> Any | None:
        """The value, or None when absent or expired."""

    @abstractmethod
    async def set(self, key: str, value: Any, ttl_seconds: float) -> None:
        """Store ``value`` for ``ttl_seconds``."""

    @abstractmethod
    async def delete(self, key: str) -> None:
        """Forget ``key``."""

    @asynccontextmanager
    async def lock(
        self, name: str, *, hold_seconds: float = 30.0, on_wait: Callable[[], None] | None = None
    ) -> AsyncIterator[None]:
        """Hold ``name`` exclusively (across replicas for shared caches).

        ``hold_seconds`` bounds both the wait (TimeoutError) and how long a crashed holder can keep
        it; ``on_wait`` is called once when another holder has it and this caller starts waiting.
        """
        locks: dict[str, asyncio.Lock] = self.__dict__.setdefault("_process_locks", {})
        local = locks.setdefault(name, asyncio.Lock())
        if local.locked() and on_wait is not None:
            on_wait()
        async with asyncio.timeout(hold_seconds):
            await local.acquire()
        try:
            yield
        finally:
            local.release()

    async def ping(self) -> None:  # noqa: B027 - optional hook
        """Raise when the cache's backend is unreachable."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class MemoryCache(Cache):
    """Process-local cache; entries are copied in and out so callers never share mutable state.

    Bounded by entries and by bytes (the serialised values): past either bound the expired entries
    go first, then the least recently used. A value larger than the byte bound is not kept.
    """

    def __init__(
        self, max_entries: int = 10_000, clock: Any = time.monotonic, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self._data: dict[str, tuple[float, bytes]] = {}
        self._max = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._clock = clock

    @property
    def size_bytes(self) -> int:
        """The bytes of the values held."""
        return self._bytes

    async def get(self, key: str) -> Any | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, raw = entry
        if expires <= self._clock():
            self._drop(key)
            return None
        self._data[key] = self._data.pop(key)  # most recently used last
        return orjson.loads(raw)

    async def set(self, key: str, value: Any, ttl_seconds: float) -> None:
        if ttl_seconds <= 0:
            return
        raw = orjson.dumps(value)
        self._drop(key)
        if len(raw) > self._max_bytes:
            return
        if len(self._data) >= self._max or self._bytes + len(raw) > self._max_bytes:
            self._evict(len(raw))
        self._data[key] = (self._clock() + ttl_seconds, raw)
        self._bytes += len(raw)

    async def delete(self, key: str) -> None:
        self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self._data.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[1])

    def _evict(self, room: int) -> None:
        now = self._clock()
        for key in [k for k, (exp, _) in self._data.items() if exp <= now]:
            self._drop(key)
        while self._data and (len(self._data) >= self._max or self._bytes + room > self._max_bytes):
            self._drop(next(iter(self._data)))
