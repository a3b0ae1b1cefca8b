"""OAuth access tokens cached per (organisation, server) through the shared Cache, one fetch at a time.

A token is used until ``refresh_margin`` seconds (60 by default, at most half its lifetime) before
it expires, then fetched again. Concurrent callers that miss share one in-flight fetch
(single-flight) instead of each hitting the token endpoint — across replicas too: the fetch runs
under a shared cache lock (a Redis lock with ``redis_url``), and whoever waited for it reads the
token the holder stored. The clock is injected so tests can move time; it is wall-clock time by
default because cache entries may be read by other replicas.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from hatchway.engine.tools.mcp.auth.oauth import AccessToken
from hatchway.store.cache import Cache

Clock = Callable[[], float]
Fetch = Callable[[], Awaitable[AccessToken]]
logger = logging.getLogger(__name__)
LOCK_SECONDS = 15.0
"""Longer than a token exchange may take (the endpoint timeout is 10 s)."""


def _waiting(key: str) -> Callable[[], None]:
    return lambda: logger.info("token %s: another replica is fetching it; waiting for its token", key)


class TokenCache:
    """``get(key, fetch)`` returns a fresh token value, fetching it (once per key at a time) if needed."""

    def __init__(
        self,
        cache: Cache,
        *,
        clock: Clock = time.time,
        refresh_margin: float = 60.0,
        lock_seconds: float = LOCK_SECONDS,
    ) -> None:
        self.cache = cache
        self.clock = clock
        self.refresh_margin = refresh_margin
        self._flights: dict[str, asyncio.Future[str]] = {}
        self.lock_seconds = lock_seconds
        """Bounds the wait for another replica's fetch (and how long a crashed fetcher blocks others)."""

    async def get(self, key: str, fetch: Fetch) -> str:
        if (token := await self._fresh(key)) is not None:
            return token
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fetch_once(key, fetch))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._land(key, done))
        # shield: a caller that gives up (deadline, cancellation) must not cancel the others' fetch
        return await asyncio.shield(flight)

    async def drop(self, key: str, token: str | None = None) -> None:
        """Forget the cached token (the server rejected it); with ``token``, only if it is that one.

        A call refused with an old token must not evict the fresh one a concurrent call already
        fetched. (Across replicas the read and the delete are not atomic; the worst case is one
        extra fetch.)
        """
        if token is not None:
            entry = await self.cache.get(key)
            if not isinstance(entry, dict) or entry.get("access_token") != token:
                return
        await self.cache.delete(key)

    async def _fetch_once(self, key: str, fetch: Fetch) -> str:
        # Another replica, or a flight that landed while this caller read the cache, may have stored one.
        if (token := await self._fresh(key)) is not None:
            return token
        held = False
        try:
            async with self.cache.lock(f"{key}:fetch", hold_seconds=self.lock_seconds, on_wait=_waiting(key)):
                held = True
                # The holder before us (another replica) has stored its token by now.
                if (token := await self._fresh(key)) is not None:
                    return token
                return await self._fetch_and_store(key, fetch)
        except TimeoutError:
            if held:
                raise
        # The holder is stuck or gone: one extra fetch beats a failed call.
        logger.warning("token fetch lock for %s not released in %gs; fetching", key, self.lock_seconds)
        return await self._fetch_and_store(key, fetch)

    async def _fetch_and_store(self, key: str, fetch: Fetch) -> str:
        access = await fetch()
        now = self.clock()
        margin = min(self.refresh_margin, access.expires_in / 2)
        entry = {"access_token": access.value, "refresh_at": now + access.expires_in - margin}
        await self.cache.set(key, entry, ttl_seconds=access.expires_in)
        return access.value

    async def _fresh(self, key: str) -> str | None:
        entry = await self.cache.get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("access_token"), str):
            return None
        if self.clock() >= float(entry.get("refresh_at", 0)):
            return None
        return entry["access_token"]

    def _land(self, key: str, flight: asyncio.Future[str]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved here so an unawaited failure is not reported as lost
