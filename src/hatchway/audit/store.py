"""The audit trail's tables (created by migration ``0014_audit``), on the shared metadata.

``audit_entries`` is append-only: one row per recorded action, numbered per organisation from 1 and
chained by hash (``chain.py``). ``audit_heads`` holds each organisation's latest position, signed; it
is also the row an append locks, so appends of one organisation are serialised across replicas.
``audit_checkpoints`` keeps a signed position every ``audit.checkpoint_every`` entries, so a chain
rewritten by someone without the master key is caught even between two heads.

No foreign key to ``organizations``: an organisation's trail outlives the organisation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.tables import Base

HASH_LENGTH = 64
"""A SHA-256 or HMAC-SHA256 digest in hex."""


class AuditEntryRow(Base):
    """One recorded action: who did what to which object, how it ended, and its place in the chain."""

    __tablename__ = "audit_entries"
    __table_args__ = (Index("ix_audit_entries_org_id_at", "org_id", "at"),)

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    """1, 2, 3… per organisation; the primary key makes (org_id, seq) unique."""
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(256))
    """``key:<id>``, ``sso:<subject>``, ``cli:<os user>`` or ``system``."""
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512))
    outcome: Mapped[str] = mapped_column(String(16))
    source: Mapped[str | None] = mapped_column(String(128))
    request_id: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]]
    prev_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    hash: Mapped[str] = mapped_column(String(HASH_LENGTH))


class AuditHead(Base):
    """An organisation's latest entry (``seq`` 0 and the genesis hash before the first), signed."""

    __tablename__ = "audit_heads"

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    key_id: Mapped[str] = mapped_column(String(32))
    """The master key (its fingerprint) the signature was made with."""
    signature: Mapped[str] = mapped_column(String(HASH_LENGTH))


class AuditCheckpoint(Base):
    """A signed position of an organisation's chain, one every ``audit.checkpoint_every`` entries."""

    __tablename__ = "audit_checkpoints"

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    at: Mapped[datetime]
    key_id: Mapped[str] = mapped_column(String(32))
    signature: Mapped[str] = mapped_column(String(HASH_LENGTH))
