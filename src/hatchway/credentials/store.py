"""The tables of per-user OAuth, on the shared metadata (migration ``0008_user_oauth``).

Every row is keyed by organisation; what it holds of a token, a client registration or an
authorization request is sealed with that organisation's vault data key (``grants.py`` seals and
opens it), so a dump of these tables reveals no credential.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.tables import Base, utcnow


class UserGrantRow(Base):
    """One end user's grant of one server: the tokens, their expiry and what refreshing them needs."""

    __tablename__ = "user_oauth_grants"

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    end_user: Mapped[str] = mapped_column(String(256), primary_key=True)
    server_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    server_id: Mapped[str] = mapped_column(String(128))
    server_url: Mapped[str] = mapped_column(Text)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    scopes: Mapped[str | None] = mapped_column(Text, default=None)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class OAuthClientRow(Base):
    """Hatchway's client registration (dynamic, or from its metadata document) with one server."""

    __tablename__ = "oauth_clients"

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    server_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OAuthConsentRow(Base):
    """An authorization behind a consent link: pending, then authorized (with the code), then used."""

    __tablename__ = "oauth_consents"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40), index=True)
    end_user: Mapped[str] = mapped_column(String(256))
    server_key: Mapped[str] = mapped_column(String(64))
    server_id: Mapped[str] = mapped_column(String(128))
    state_hash: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    """``pending`` (link given), ``authorized`` (the callback came), ``used`` (the code was redeemed)."""
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    """The authorization request (URL, state, PKCE verifier), the server entry, and later the code."""
    trusted: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
