"""The vault's tables (created by migration ``0002_vault``): wrapped data keys and sealed secrets."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.tables import Base, utcnow


class VaultDataKey(Base):
    """One AES-256 data key per organisation, wrapped (sealed) by the master key."""

    __tablename__ = "vault_data_keys"

    org_id: Mapped[str] = mapped_column(
        String(40), ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    wrapped_key: Mapped[bytes] = mapped_column(LargeBinary)
    master_key_id: Mapped[str] = mapped_column(String(32))
    """Fingerprint of the master key that wrapped it: the key version rotation moves forward."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    rewrapped_at: Mapped[datetime | None] = mapped_column(default=None)


class VaultSecret(Base):
    """A secret value sealed by its organisation's data key, bound to (organisation, name)."""

    __tablename__ = "vault_secrets"
    __table_args__ = (UniqueConstraint("org_id", "name", name="uq_vault_secrets_org_id_name"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    allowed_hosts: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
