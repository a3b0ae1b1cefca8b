"""Organisations and API keys. Keys are shown once and stored as SHA-256 hashes."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from hatchway.errors import AuthenticationError, Conflict, NotFound
from hatchway.ids import new_id
from hatchway.principal import Principal, Role
from hatchway.store.db import Database
from hatchway.store.tables import ApiKey, Organization, utcnow

KEY_PREFIX = "hw-"
AUTH_CACHE_SECONDS = 10.0
"""The default of ``access.key_cache_seconds``: a revoked key (or one whose role or restrictions
changed) keeps its old powers on another replica for at most this long; the cache spares a DB read
per request. The replica that made the change forgets its cache at once."""


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

    def __init__(self, db: Database, *, cache_seconds: float = AUTH_CACHE_SECONDS) -> None:
        self.db = db
        self.cache_seconds = cache_seconds
        """How long a replica trusts a key it looked up (``access.key_cache_seconds``)."""
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

    async def create_key(
        self,
        org_name_or_id: str,
        name: str = "default",
        *,
        role: Role = Role.APP,
        description: str | None = None,
        allowed_models: list[str] | None = None,
        allowed_mcp_endpoints: list[str] | None = None,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key for the organisation: returns the row and the plaintext key (shown once)."""
        org = await self.get_org(org_name_or_id)
        plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
        row = ApiKey(
            id=new_id("key"),
            org_id=org.id,
            name=name,
            key_prefix=plaintext[:10],
            key_hash=hash_key(plaintext),
            role=Role(role).value,
            description=description,
            allowed_models=allowed_models,
            allowed_mcp_endpoints=allowed_mcp_endpoints,
            expires_at=expires_at,
            created_at=utcnow(),
        )
        async with self.db.session() as s:
            s.add(row)
        return row, plaintext

    async def list_keys(self, org_id: str, *, include_revoked: bool = False) -> list[ApiKey]:
        query = select(ApiKey).where(ApiKey.org_id == org_id).order_by(ApiKey.created_at, ApiKey.id)
        if not include_revoked:
            query = query.where(ApiKey.revoked_at.is_(None))
        async with self.db.session() as s:
            return list(await s.scalars(query))

    async def get_key(self, org_id: str, key_id: str) -> ApiKey:
        """The organisation's key ``key_id`` (by id or name); NotFound otherwise."""
        async with self.db.session() as s:
            row = await s.scalar(
                select(ApiKey)
                .where(ApiKey.org_id == org_id, (ApiKey.id == key_id) | (ApiKey.name == key_id))
                .order_by(ApiKey.revoked_at.is_not(None), ApiKey.created_at.desc())
                .limit(1)
            )
        if row is None:
            raise NotFound(f"No API key '{key_id}' in this organisation.", param="key_id")
        return row

    async def update_key(self, org_id: str, key_id: str, **changes: Any) -> ApiKey:
        """Change a key's role, restrictions, expiry or description (only the fields given)."""
        row = await self.get_key(org_id, key_id)
        async with self.db.session() as s:
            await s.execute(update(ApiKey).where(ApiKey.id == row.id).values(**changes))
        self.forget_cached()
        return await self.get_key(org_id, row.id)

    async def revoke_key(self, org_id: str, key_id: str) -> ApiKey:
        """Revoke a key: refused here at once, on other replicas within the key cache's 10 s."""
        row = await self.get_key(org_id, key_id)
        if row.revoked_at is None:
            async with self.db.session() as s:
                await s.execute(update(ApiKey).where(ApiKey.id == row.id).values(revoked_at=utcnow()))
        self.forget_cached()
        return await self.get_key(org_id, row.id)

    async def rotate_key(
        self, org_id: str, key_id: str, *, grace_seconds: float
    ) -> tuple[ApiKey, str, ApiKey]:
        """A new key with the old one's name, role and restrictions; the old one keeps working for
        ``grace_seconds`` (or less, if it expired sooner). Returns (new row, plaintext, old row)."""
        old = await self.get_key(org_id, key_id)
        if old.revoked_at is not None:
            raise Conflict(f"API key {old.id} is revoked; create a new key instead.", param="key_id")
        new, plaintext = await self.create_key(
            org_id,
            old.name,
            role=Role(old.role),
            description=old.description,
            allowed_models=old.allowed_models,
            allowed_mcp_endpoints=old.allowed_mcp_endpoints,
            expires_at=old.expires_at,
        )
        ends = utcnow() + timedelta(seconds=grace_seconds)
        if old.expires_at is not None:
            ends = min(ends, old.expires_at)
        async with self.db.session() as s:
            await s.execute(
                update(ApiKey).where(ApiKey.id == old.id).values(expires_at=ends, replaced_by=new.id)
            )
        self.forget_cached()
        return new, plaintext, await self.get_key(org_id, old.id)

    def forget_cached(self) -> None:
        """Drop this process's cached keys (after a change made here; other replicas: the cache's TTL)."""
        self._auth_cache.clear()

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
        now = utcnow()
        if found is None or (found[0].expires_at is not None and found[0].expires_at <= now):
            self._auth_cache.pop(cache_key, None)
            if found is not None:
                raise AuthenticationError("This API key has expired.", code="expired_api_key")
            raise AuthenticationError("Incorrect API key provided.")
        key, org = found
        principal = Principal(
            org_id=org.id,
            org_name=org.name,
            key_id=key.id,
            key_name=key.name,
            role=Role(key.role),
            allowed_models=frozenset(key.allowed_models) if key.allowed_models is not None else None,
            allowed_mcp_endpoints=(
                frozenset(key.allowed_mcp_endpoints) if key.allowed_mcp_endpoints is not None else None
            ),
            expires_at=key.expires_at,
        )
        if len(self._auth_cache) > 10_000:
            self._auth_cache.clear()
        keep = self.cache_seconds
        if key.expires_at is not None:  # an expiring key is not served from the cache past its expiry
            keep = min(keep, (key.expires_at - now).total_seconds())
        self._auth_cache[cache_key] = (time.monotonic() + keep, principal)
        return principal
