"""The vault: secrets per organisation, sealed with envelope encryption.

The master key wraps one random data key per organisation; the data key seals that
organisation's secrets, each bound to (organisation, name). Rotating the master key re-wraps the
data keys only — secrets stay as they are — and the master key id stored beside each data key
tells a wrong master key apart from damaged data.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from hatchway.errors import Conflict, DecryptionError, InvalidRequest, NotFound, SecretNotFound
from hatchway.ids import new_id
from hatchway.observability.log_redaction import SECRETS
from hatchway.store.db import Database
from hatchway.store.tables import Organization, utcnow
from hatchway.vault.master_key import MasterKey
from hatchway.vault.names import check_name, normalise_hosts, parse_ref
from hatchway.vault.sealing import blob_aad, data_key_aad, open_sealed, seal, secret_aad
from hatchway.vault.tables import VaultDataKey, VaultSecret

SYSTEM_ORG = "system"
"""The reserved organisation whose vault holds hatchway.yaml's ``api_key: secret.<name>`` values."""
MAX_VALUE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What may be shown about a secret: never its value."""

    name: str
    allowed_hosts: list[str]
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, object]:
        return {
            "object": "secret",
            "name": self.name,
            "allowed_hosts": list(self.allowed_hosts),
            "created_at": int(self.created_at.timestamp()),
            "updated_at": int(self.updated_at.timestamp()),
        }


@dataclass(frozen=True, slots=True)
class Secret:
    """A decrypted secret; ``value`` is kept out of ``repr`` so it cannot reach a log by accident."""

    name: str
    value: str = field(repr=False)
    allowed_hosts: list[str] = field(default_factory=list)


def _info(row: VaultSecret) -> SecretInfo:
    return SecretInfo(row.name, list(row.allowed_hosts or []), row.created_at, row.updated_at)


class Vault:
    """Stores, lists, reads and deletes secrets of one organisation at a time."""

    def __init__(self, db: Database, master_key: MasterKey) -> None:
        self.db = db
        self.master_key = master_key
        self._data_keys: dict[str, bytes] = {}
        self._creating = asyncio.Lock()

    async def put(
        self, org_id: str, name: str, value: str, allowed_hosts: list[str] | None = None
    ) -> tuple[SecretInfo, bool]:
        """Create or replace a secret; returns its info and whether it was created."""
        check_name(name)
        hosts = normalise_hosts(allowed_hosts)
        raw = value.encode("utf-8")
        if not raw:
            raise InvalidRequest("value: a secret value must not be empty", param="value")
        if len(raw) > MAX_VALUE_BYTES:
            raise InvalidRequest(f"value: at most {MAX_VALUE_BYTES} bytes (got {len(raw)})", param="value")
        ciphertext = seal(await self._data_key(org_id, create=True), raw, secret_aad(org_id, name))
        for _ in range(2):  # a concurrent first write of the same name loses the insert race once
            try:
                return await self._upsert(org_id, name, ciphertext, hosts)
            except IntegrityError:
                continue
        raise Conflict(f"secret '{name}' is being written concurrently; retry", param="name")

    async def _upsert(
        self, org_id: str, name: str, ciphertext: bytes, hosts: list[str]
    ) -> tuple[SecretInfo, bool]:
        async with self.db.session() as s:
            row = await s.scalar(select(VaultSecret).where(_is(org_id, name)))
            created = row is None
            if row is None:
                row = VaultSecret(id=new_id("sec"), org_id=org_id, name=name)
                s.add(row)
            row.ciphertext = ciphertext
            row.allowed_hosts = hosts
            row.updated_at = utcnow()
            await s.flush()
            return _info(row), created

    async def get(self, org_id: str, name: str) -> Secret:
        """The decrypted secret; SecretNotFound when this organisation has none of that name."""
        check_name(name)
        async with self.db.session() as s:
            row = await s.scalar(select(VaultSecret).where(_is(org_id, name)))
        if row is None:
            raise SecretNotFound(
                f"secret '{name}' not found in this organisation: store it with "
                f"PUT /v1/secrets/{name} or `hatchway secrets set {name} --org <org>`",
                param="name",
            )
        data_key = await self._data_key(org_id, create=False)
        raw = open_sealed(data_key, row.ciphertext, secret_aad(org_id, name), what=f"secret '{name}'")
        value = raw.decode("utf-8")
        SECRETS.add(value)  # decrypted in this process: never in a third-party log line
        return Secret(name, value, list(row.allowed_hosts or []))

    async def list_secrets(self, org_id: str) -> list[SecretInfo]:
        """Every secret of the organisation, by name, without values."""
        async with self.db.session() as s:
            rows = await s.scalars(
                select(VaultSecret).where(VaultSecret.org_id == org_id).order_by(VaultSecret.name)
            )
            return [_info(r) for r in rows]

    async def delete(self, org_id: str, name: str) -> None:
        """Forget a secret; SecretNotFound when there is none of that name."""
        check_name(name)
        async with self.db.session() as s:
            result = await s.execute(delete(VaultSecret).where(_is(org_id, name)))
        if not result.rowcount:  # type: ignore[attr-defined]
            raise SecretNotFound(f"secret '{name}' not found in this organisation", param="name")

    async def system_secret(self, ref: str) -> str:
        """The value behind a hatchway.yaml ``secret.<name>``, from the ``system`` organisation."""
        name = parse_ref(ref, param="api_key")
        async with self.db.session() as s:
            org_id = await s.scalar(select(Organization.id).where(Organization.name == SYSTEM_ORG))
        if org_id is None:
            raise SecretNotFound(
                f"{ref}: hatchway.yaml secrets live in the organisation '{SYSTEM_ORG}', which does not "
                f"exist: run `hatchway orgs create {SYSTEM_ORG}` and "
                f"`hatchway secrets set {name} --org {SYSTEM_ORG}`"
            )
        try:
            return (await self.get(org_id, name)).value
        except SecretNotFound:
            raise SecretNotFound(
                f"{ref}: no secret '{name}' in the organisation '{SYSTEM_ORG}': run "
                f"`hatchway secrets set {name} --org {SYSTEM_ORG}`"
            ) from None

    # -- opaque blobs ----------------------------------------------------------------------------

    async def seal_blob(self, org_id: str, plaintext: bytes, *, purpose: str) -> bytes:
        """Seal data the organisation's clients hold but must not read or alter (Responses
        compaction items). The data key survives master key rotation, so old blobs still open."""
        return seal(await self._data_key(org_id, create=True), plaintext, blob_aad(org_id, purpose))

    async def open_blob(self, org_id: str, blob: bytes, *, purpose: str) -> bytes:
        """Open a blob from ``seal_blob`` of the same organisation and purpose; DecryptionError otherwise."""
        key = await self._data_key(org_id, create=True)
        return open_sealed(key, blob, blob_aad(org_id, purpose), what=purpose)

    # -- data keys -------------------------------------------------------------------------------

    async def _data_key(self, org_id: str, *, create: bool) -> bytes:
        if (key := self._data_keys.get(org_id)) is not None:
            return key
        async with self.db.session() as s:
            row = await s.get(VaultDataKey, org_id)
        if row is None and create:
            async with self._creating:
                row = await self._create_data_key(org_id)
        if row is None:
            raise DecryptionError(f"organisation {org_id} has secrets but no data key; the vault is damaged")
        key = self._unwrap(row)
        self._data_keys[org_id] = key
        return key

    async def _create_data_key(self, org_id: str) -> VaultDataKey:
        key = os.urandom(32)
        row = VaultDataKey(
            org_id=org_id,
            wrapped_key=seal(self.master_key.key, key, data_key_aad(org_id)),
            master_key_id=self.master_key.key_id,
        )
        try:
            async with self.db.session() as s:
                s.add(row)
        except IntegrityError:
            async with self.db.session() as s:  # another replica created it first, or no such org
                existing = await s.get(VaultDataKey, org_id)
                if existing is None:
                    raise NotFound(f"No organisation with id '{org_id}'.", param="org") from None
                return existing
        return row

    def _unwrap(self, row: VaultDataKey) -> bytes:
        if row.master_key_id != self.master_key.key_id:
            raise DecryptionError(
                f"the master key does not match the one that encrypted these secrets (stored key id "
                f"{row.master_key_id}, configured key id {self.master_key.key_id} from "
                f"{self.master_key.source}); configure the right key, or rerun "
                f"`hatchway vault rotate-master-key` if a rotation was interrupted"
            )
        return open_sealed(self.master_key.key, row.wrapped_key, data_key_aad(row.org_id), what="data key")

    async def rewrap(self, new_key: MasterKey) -> int:
        """Re-wrap every data key under ``new_key`` in one transaction; returns how many moved.

        Data keys already under ``new_key`` are left alone, so an interrupted rotation can be rerun.
        """
        moved = 0
        async with self.db.session() as s:
            rows = await _locked_data_keys(s, lock=not self.db.is_sqlite)
            for row in rows:
                if row.master_key_id == new_key.key_id:
                    continue
                key = self._unwrap(row)
                row.wrapped_key = seal(new_key.key, key, data_key_aad(row.org_id))
                row.master_key_id = new_key.key_id
                row.rewrapped_at = utcnow()
                moved += 1
        self.master_key = new_key
        return moved


def _is(org_id: str, name: str):  # type: ignore[no-untyped-def]
    return (VaultSecret.org_id == org_id) & (VaultSecret.name == name)


async def _locked_data_keys(session: AsyncSession, *, lock: bool) -> list[VaultDataKey]:
    query = select(VaultDataKey).order_by(VaultDataKey.org_id)
    if lock:  # PostgreSQL: no replica creates or re-wraps a data key meanwhile (SQLite locks the file)
        query = query.with_for_update()
    return list(await session.scalars(query))
