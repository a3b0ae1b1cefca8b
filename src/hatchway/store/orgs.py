"""Organisations and API keys. Keys are shown once and stored as SHA-256 hashes."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from hatchway.errors import AuthenticationError, Conflict, NotFound
from hatchway.ids import new_id
from hatchway.principal import Principal
from hatchway.store.db import Database
from hatchway.store.tables import ApiKey, Organization

KEY_PREFIX = "hw-"
_AUTH_CACHE_SECONDS = 10.0
"""A revoked key keeps working on a replica for at most this long; the cache spares a DB read per request."""


def hash_key(key: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is enough (no password stretching needed).
    return hashlib.sha256(key.encode()).hexdigest()


_CACHE_KEY = secrets.token_bytes(32)
"""This process's key for ``_cache_key``: drawn at import, never stored or shown."""


def _cache_key(bearer: str) -> bytes:
    """What the authentication cache files a bearer under: BLAKE2b keyed with a per-process secret,
    so no raw key is held in memory and the digest means nothing outside this process.

    Not ``hash_key``: that is what the database stores and must stay SHA-256, but through OpenSSL
    it cost 8-50 µs per request after the event loop had been idle (make bench's concurrency 1, a
    20 ms upstream), where CPython's own BLAKE2b costs ~5; a hit now skips SHA-256 entirely.
    """
    return hashlib.blake2b(bearer.encode(), key=_CACHE_KEY, digest_size=32).digest()


class OrgStore:
    """Creates organisations and keys; turns a bearer key into a Principal."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._auth_cache: dict[bytes, tuple[float, Principal]] = {}
        """``_cache_key(bearer)`` → (expiry, principal); a miss is looked up by ``hash_key``."""
        self._auth_lookups: dict[bytes, asyncio.Future[Principal]] = {}

    async def create_org(self, name: str) -> Organization:
        org = Organization(id=new_id("org"), name=name)
        try:
            async with self.db.session() as s:
                s.add(org)
        except IntegrityError:
            raise Conflict(f"An organisation named '{name}' already exists.", param="name") from None
        return org

    async def get_org(self, name_or_id: str) -> Organization:
        async with self.db.session() as s:
            org = await s.scalar(
                select(Organization).where(
                    (Organization.name == name_or_id) | (Organization.id == name_or_id)
                )
            )
        if org is None:
            raise NotFound(f"No organisation named '{name_or_id}'.", param="org")
        return org

    async def list_orgs(self) -> list[Organization]:
        async with self.db.session() as s:
            return list(await s.scalars(select(Organization).order_by(Organization.created_at)))

    async def create_key(self, org_name_or_id: str, name: str = "default") -> tuple[ApiKey, str]:
        """A new key for the organisation: returns the row and the plaintext key (shown once)."""
        org = await self.get_org(org_name_or_id)
        plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
        row = ApiKey(
            id=new_id("key"),
            org_id=org.id,
            name=name,
            key_prefix=plaintext[:10],
            key_hash=hash_key(plaintext),
        )
        async with self.db.session() as s:
            s.add(row)
        return row, plaintext

    async def authenticate(self, bearer: str | None) -> Principal:
        """The Principal behind ``Authorization: Bearer <key>``; AuthenticationError otherwise."""
        if not bearer:
            raise AuthenticationError(
                "Missing API key: send 'Authorization: Bearer <key>' "
                "(create one with `hatchway keys create`)."
            )
        cache_key = _cache_key(bearer)
        cached = self._auth_cache.get(cache_key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        # One lookup per key however many requests miss together: when a busy key's entry expires,
        # every request in flight misses at once, and each taking a connection of its own drained
        # the pool (on SQLite, up to 15 connections, each a thread with its page cache: +5 MiB).
        lookup = self._auth_lookups.get(cache_key)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up(cache_key, hash_key(bearer)))
            self._auth_lookups[cache_key] = lookup
            lookup.add_done_callback(lambda done: self._looked_up(cache_key, done))
        return await asyncio.shield(lookup)  # a caller that goes away does not cancel the others' lookup

    def _looked_up(self, cache_key: bytes, done: asyncio.Future[Principal]) -> None:
        self._auth_lookups.pop(cache_key, None)
        if not done.cancelled():
            done.exception()  # retrieved: when every caller went away, asyncio would log it as lost

    async def _look_up(self, cache_key: bytes, digest: str) -> Principal:
        async with self.db.session() as s:
            row = await s.execute(
                select(ApiKey, Organization)
                .join(Organization, Organization.id == ApiKey.org_id)
                .where(ApiKey.key_hash == digest, ApiKey.revoked_at.is_(None))
            )
            found = row.first()
        if found is None:
            self._auth_cache.pop(cache_key, None)
            raise AuthenticationError("Incorrect API key provided.")
        key, org = found
        principal = Principal(org_id=org.id, org_name=org.name, key_id=key.id, key_name=key.name)
        if len(self._auth_cache) > 10_000:
            self._auth_cache.clear()
        self._auth_cache[cache_key] = (time.monotonic() + _AUTH_CACHE_SECONDS, principal)
        return principal
