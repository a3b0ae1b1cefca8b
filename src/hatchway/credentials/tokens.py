"""OAuth access tokens cached per (organisation, server) through the shared Cache, one fetch at a time.

A token is used until ``refresh_margin`` seconds (60 by default, at most half its lifetime) before
it expires, then fetched again. Concurrent callers that miss share one in-flight fetch
(single-flight) instead of each hitting the token endpoint — across replicas too: the fetch runs
under a shared cache lock (a Redis lock with ``redis_url``), and whoever waited for it reads the
token the holder stored. The clock is injected so tests can move time; it is wall-clock time by
default because cache entries may be read by other replicas.

Tokens are sealed before they enter the cache (AES-256-GCM under the organisation's vault data key,
bound to the cache key), so a dump of the shared Redis reveals none; another replica with the same
master key and database opens them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hatchway.credentials.oauth import AccessToken
from hatchway.errors import DecryptionError
from hatchway.store.cache import Cache
from hatchway.vault.sealing import blob_aad, open_sealed, seal

Clock = Callable[[], float]
Fetch = Callable[[], Awaitable[AccessToken]]
logger = logging.getLogger(__name__)
LOCK_SECONDS = 15.0
"""Longer than a token exchange may take (the endpoint timeout is 10 s)."""


class TokenSealer(Protocol):
    """Seals a token for the shared cache: the vault (``Vault.seal_blob`` / ``open_blob``)."""

    async def seal_blob(self, org_id: str, plaintext: bytes, *, purpose: str) -> bytes: ...

    async def open_blob(self, org_id: str, blob: bytes, *, purpose: str) -> bytes: ...


class ProcessSealer:
    """A key that lives and dies with this process, for callers without a vault (``hatchway mcp
    probe``, whose cache is in-process anyway)."""

    def __init__(self) -> None:
        self._key = os.urandom(32)

    async def seal_blob(self, org_id: str, plaintext: bytes, *, purpose: str) -> bytes:
        return seal(self._key, plaintext, blob_aad(org_id, purpose))

    async def open_blob(self, org_id: str, blob: bytes, *, purpose: str) -> bytes:
        return open_sealed(self._key, blob, blob_aad(org_id, purpose), what=purpose)


_PROCESS_SEALER = ProcessSealer()


def _waiting(key: str) -> Callable[[], None]:
    return lambda: logger.info("token %s: another replica is fetching it; waiting for its token", key)


class TokenCache:
    """``get(key, fetch)`` returns a fresh token value, fetching it (once per key at a time) if needed."""

    def __init__(
        self,
        cache: Cache,
        *,
        sealer: TokenSealer | None = None,
        clock: Clock = time.time,
        refresh_margin: float = 60.0,
        lock_seconds: float = LOCK_SECONDS,
    ) -> None:
        self.cache = cache
        self.sealer = sealer or _PROCESS_SEALER
        self.clock = clock
        self.refresh_margin = refresh_margin
        self._flights: dict[str, asyncio.Future[str]] = {}
        self.lock_seconds = lock_seconds
        """Bounds the wait for another replica's fetch (and how long a crashed fetcher blocks others)."""

    async def get(self, key: str, fetch: Fetch, *, org_id: str) -> str:
        """A fresh token for ``key`` (a key of organisation ``org_id``, whose vault seals it)."""
        if (token := await self._fresh(key, org_id)) is not None:
            return token
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fetch_once(key, fetch, org_id))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._land(key, done))
        # shield: a caller that gives up (deadline, cancellation) must not cancel the others' fetch
        return await asyncio.shield(flight)

    async def drop(self, key: str, token: str | None = None, *, org_id: str) -> None:
        """Forget the cached token (the server rejected it); with ``token``, only if it is that one.

        A call refused with an old token must not evict the fresh one a concurrent call already
        fetched. (Across replicas the read and the delete are not atomic; the worst case is one
        extra fetch.)
        """
        if token is not None:
            entry = await self._entry(key, org_id)
            if entry is None or entry[0] != token:
                return
        await self.cache.delete(key)

    async def _fetch_once(self, key: str, fetch: Fetch, org_id: str) -> str:
        # Another replica, or a flight that landed while this caller read the cache, may have stored one.
        if (token := await self._fresh(key, org_id)) is not None:
            return token
        held = False
        try:
            async with self.cache.lock(f"{key}:fetch", hold_seconds=self.lock_seconds, on_wait=_waiting(key)):
                held = True
                # The holder before us (another replica) has stored its token by now.
                if (token := await self._fresh(key, org_id)) is not None:
                    return token
                return await self._fetch_and_store(key, fetch, org_id)
        except TimeoutError:
            if held:
                raise
        # The holder is stuck or gone: one extra fetch beats a failed call.
        logger.warning("token fetch lock for %s not released in %gs; fetching", key, self.lock_seconds)
        return await self._fetch_and_store(key, fetch, org_id)

    async def _fetch_and_store(self, key: str, fetch: Fetch, org_id: str) -> str:
        access = await fetch()
        now = self.clock()
        margin = min(self.refresh_margin, access.expires_in / 2)
        sealed = await self.sealer.seal_blob(org_id, access.value.encode(), purpose=_purpose(key))
        entry = {
            "sealed": base64.b64encode(sealed).decode("ascii"),
            "refresh_at": now + access.expires_in - margin,
        }
        await self.cache.set(key, entry, ttl_seconds=access.expires_in)
        return access.value

    async def _fresh(self, key: str, org_id: str) -> str | None:
        entry = await self._entry(key, org_id)
        if entry is None or self.clock() >= entry[1]:
            return None
        return entry[0]

    async def _entry(self, key: str, org_id: str) -> tuple[str, float] | None:
        """The cached (token, refresh_at), or None when absent or unreadable (then it is fetched again)."""
        entry: Any = await self.cache.get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("sealed"), str):
            return None  # also a plaintext entry left by an older version: replaced by the next fetch
        try:
            blob = base64.b64decode(entry["sealed"], validate=True)
            token = (await self.sealer.open_blob(org_id, blob, purpose=_purpose(key))).decode()
        except (binascii.Error, UnicodeDecodeError, DecryptionError) as exc:
            logger.warning("cached token %s cannot be opened (%s); fetching again", key, type(exc).__name__)
            return None
        return token, float(entry.get("refresh_at", 0))

    def _land(self, key: str, flight: asyncio.Future[str]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved here so an unawaited failure is not reported as lost


def _purpose(key: str) -> str:
    """Binds a sealed token to its cache key: copied under another key, it does not open."""
    return f"mcp-oauth-token:{key}"
