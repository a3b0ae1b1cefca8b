"""Signed-in people's sessions (SSO), kept in the database so that every replica sees a sign-out at once,
and the table of sign-ins under way (``sso_logins``, used by ``access/sso.py``).

A session is named by a random 256-bit value that only the browser holds (an HttpOnly cookie, set by
``api/sso.py``); the table keeps its SHA-256, so a copy of the database signs no one in. A session ends
``session_seconds`` after sign-in whatever its use, after ``idle_seconds`` unused, or when its person
signs out (``ended_at``): each replica reads the row on every request, so none keeps serving an ended
session. ``last_seen`` is written at most every ``TOUCH_SECONDS`` (or a tenth of the idle time), not on
every request.

What a person may do was decided at sign-in (``access/sso.py`` maps the ID token's groups) and is kept
with the session: a change of groups at the provider takes effect at the next sign-in.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, Boolean, Index, String, delete, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.config.access import SsoSettings
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

TOUCH_SECONDS = 60.0
MAX_COOKIE_CHARS = 128
MAX_GROUPS = 1000
"""Groups kept of a person's sign-in (``access/end_users.MAX_GROUPS``): every one up to this many."""
"""A session id is 43 characters; anything much longer is not one (and is not hashed)."""
_ROLE_RANK = {Role.APP: 0, Role.VIEWER: 1, Role.ADMIN: 2, Role.PLATFORM: 3}


class SsoSessionRow(Base):
    """One signed-in person's session (migration ``0015_sessions``)."""

    __tablename__ = "sso_sessions"
    __table_args__ = (Index("ix_sso_sessions_expires_at", "expires_at"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    """SHA-256 of the cookie's value (the value itself is never stored)."""
    subject: Mapped[str] = mapped_column(String(256))
    """The ID token's ``sub``."""
    name: Mapped[str | None] = mapped_column(String(256))
    email: Mapped[str | None] = mapped_column(String(320))
    grants: Mapped[dict[str, Any]]
    """``{org_id: {"name": …, "role": …}}``: the roles granted per organisation at sign-in."""
    platform: Mapped[bool] = mapped_column(Boolean, default=False)
    """An admin of every organisation (a ``platform`` role mapping)."""
    csrf_token: Mapped[str] = mapped_column(String(64))
    """Sent back by the page in ``X-CSRF-Token`` with every state-changing request."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    last_seen: Mapped[datetime]
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    groups: Mapped[list[str] | None] = mapped_column(JSON, default=None)
    """The person's groups at sign-in (the ``groups_claim``; migration 0018_session_groups): whom an
    approval routed to a group is offered to."""


class SsoLoginRow(Base):
    """A sign-in under way (``access/sso.py``) until its callback redeems it (migration 0015_sessions)."""

    __tablename__ = "sso_logins"
    __table_args__ = (Index("ix_sso_logins_expires_at", "expires_at"),)

    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    binding_hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 of the pre-login cookie's value: the browser that started the sign-in."""
    nonce: Mapped[str] = mapped_column(String(64))
    code_verifier: Mapped[str] = mapped_column(String(128))
    redirect_uri: Mapped[str] = mapped_column(String(2048))
    next_path: Mapped[str] = mapped_column(String(512))
    expires_at: Mapped[datetime]


@dataclass(frozen=True, slots=True)
class OrgGrant:
    """A role in one organisation."""

    org_id: str
    name: str
    role: Role


@dataclass(frozen=True, slots=True)
class Grants:
    """What a person may do: a role per organisation, and whether they administer every one."""

    orgs: tuple[OrgGrant, ...] = ()
    platform: bool = False

    def __bool__(self) -> bool:
        return self.platform or bool(self.orgs)

    def find(self, ref: str) -> OrgGrant | None:
        """The grant in the organisation ``ref`` names (its id or its name)."""
        return next((g for g in self.orgs if ref in (g.org_id, g.name)), None)

    def with_role(self, org_id: str, name: str, role: Role) -> Grants:
        """These grants and ``role`` in ``org_id``; of two roles in one organisation the broader
        stays (admin over viewer over app: a person never gets less than a group grants)."""
        current = next((g for g in self.orgs if g.org_id == org_id), None)
        if current is not None and _ROLE_RANK[current.role] >= _ROLE_RANK[role]:
            return self
        others = tuple(g for g in self.orgs if g.org_id != org_id)
        return Grants((*others, OrgGrant(org_id, name, role)), self.platform)

    def to_json(self) -> dict[str, Any]:
        return {g.org_id: {"name": g.name, "role": g.role.value} for g in self.orgs}

    @classmethod
    def from_row(cls, grants: dict[str, Any], platform: bool) -> Grants:
        orgs = tuple(OrgGrant(org_id, str(g["name"]), Role(g["role"])) for org_id, g in grants.items())
        return cls(orgs, platform)


@dataclass(frozen=True, slots=True)
class Session:
    """A live session, as a request sees it."""

    subject: str
    name: str | None
    email: str | None
    grants: Grants
    csrf_token: str
    created_at: datetime
    expires_at: datetime
    last_seen: datetime
    groups: tuple[str, ...] = ()


def session_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SsoSessions:
    """Creates, finds and ends sessions; ``clock`` is injected so tests can move time."""

    def __init__(
        self, db: Database, settings: SsoSettings, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.db = db
        self.lifetime = timedelta(seconds=settings.session_seconds)
        self.idle = timedelta(seconds=settings.idle_seconds)
        self.touch = timedelta(seconds=min(TOUCH_SECONDS, settings.idle_seconds / 10))
        self.clock = clock

    async def create(
        self,
        subject: str,
        name: str | None,
        email: str | None,
        grants: Grants,
        groups: Iterable[str] = (),
    ) -> tuple[str, Session]:
        """A new session: (the cookie's value, the session). Expired rows are swept on the way."""
        value = secrets.token_urlsafe(32)
        now = self.clock()
        row = SsoSessionRow(
            id_hash=session_hash(value),
            subject=subject,
            name=name,
            email=email,
            grants=grants.to_json(),
            platform=grants.platform,
            groups=sorted(groups)[:MAX_GROUPS],
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + self.lifetime,
            last_seen=now,
        )
        async with self.db.session() as s:
            await s.execute(delete(SsoSessionRow).where(SsoSessionRow.expires_at < now))
            s.add(row)
        return value, _session(row)

    async def _live_row(self, s: AsyncSession, value: str | None, now: datetime) -> SsoSessionRow | None:
        """The row of the live session the cookie ``value`` names, in ``s``; None otherwise."""
        if not value or len(value) > MAX_COOKIE_CHARS:
            return None
        row = await s.get(SsoSessionRow, session_hash(value))
        return row if row is not None and self._live(row, now) else None

    async def find(self, value: str | None) -> Session | None:
        """The live session ``value`` names; None when unknown, ended, expired or idle too long."""
        now = self.clock()
        async with self.db.session() as s:
            row = await self._live_row(s, value, now)
            if row is None:
                return None
            if now - row.last_seen >= self.touch:
                row.last_seen = now
            return _session(row)

    async def end(self, value: str | None) -> Session | None:
        """End the session ``value`` names (sign-out); the session it was, or None if none was live."""
        now = self.clock()
        async with self.db.session() as s:
            row = await self._live_row(s, value, now)
            if row is None:
                return None
            ended = await s.execute(
                update(SsoSessionRow)
                .where(SsoSessionRow.id_hash == row.id_hash, SsoSessionRow.ended_at.is_(None))
                .values(ended_at=now)
            )
            return _session(row) if ended.rowcount == 1 else None  # type: ignore[attr-defined]

    def _live(self, row: SsoSessionRow, now: datetime) -> bool:
        return row.ended_at is None and row.expires_at > now and row.last_seen + self.idle > now


def _session(row: SsoSessionRow) -> Session:
    return Session(
        subject=row.subject,
        name=row.name,
        email=row.email,
        grants=Grants.from_row(row.grants, row.platform),
        csrf_token=row.csrf_token,
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_seen=row.last_seen,
        groups=tuple(row.groups or ()),
    )
