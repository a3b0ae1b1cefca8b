"""How an audit entry is hashed into its organisation's chain, and how positions are signed.

An entry's hash is ``sha256(prev_hash || canonical(entry))``: ``prev_hash`` as its 32 raw bytes,
then the canonical serialisation of every field but ``hash`` (``prev_hash`` included). The canonical
form is deterministic JSON — sorted keys, no whitespace, UTF-8 — with the time as UTC ISO 8601 to the
microsecond (``2025-01-31T09:15:02.000000+00:00``), which is what both SQLite and PostgreSQL give
back, so an entry read from either hashes as it did when it was written. An organisation's first
entry links to a fixed genesis value, ``sha256("hatchway-audit\\0" + org_id)``.

A position of the chain (organisation, seq, hash) is signed with HMAC-SHA256 under a key derived
from the master key by HKDF (``info = b"hatchway audit checkpoint v1"``): the head after every
entry and a checkpoint every ``audit.checkpoint_every`` entries. Anyone with database access can
append rows and recompute hashes; only the master key's holder can sign where the chain ends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hatchway.vault.master_key import MasterKey

ENTRY_FIELDS = (
    "org_id",
    "seq",
    "at",
    "actor",
    "action",
    "target",
    "outcome",
    "source",
    "request_id",
    "detail",
    "prev_hash",
)
"""The fields an entry's hash covers: all of them but ``hash``."""
SIGNING_INFO = b"hatchway audit checkpoint v1"


def format_time(at: datetime) -> str:
    """An entry's time as it is hashed and exported: UTC, ISO 8601, microseconds always shown."""
    if at.tzinfo is None:
        raise ValueError("naive datetime in an audit entry")
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def genesis_hash(org_id: str) -> str:
    """What an organisation's first entry links to."""
    return hashlib.sha256(b"hatchway-audit\0" + org_id.encode()).hexdigest()


def canonical(fields: Mapping[str, Any]) -> bytes:
    """The deterministic serialisation of an entry's hashed fields (``at`` already formatted)."""
    chosen = {name: fields[name] for name in ENTRY_FIELDS}
    return json.dumps(
        chosen, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def entry_hash(fields: Mapping[str, Any]) -> str:
    """``sha256(prev_hash || canonical)`` of an entry given as its exported fields.

    Raises:
        ValueError: ``prev_hash`` is not hex, or a field is not JSON (a damaged record).
    """
    return hashlib.sha256(bytes.fromhex(fields["prev_hash"]) + canonical(fields)).hexdigest()


def _position(org_id: str, seq: int, chain_hash: str) -> bytes:
    # A JSON array: the three values cannot run into each other, whatever an org_id holds.
    return json.dumps(["hatchway-audit-position", org_id, seq, chain_hash], separators=(",", ":")).encode()


class Signer:
    """Signs and checks positions of a chain with the key derived from one master key."""

    def __init__(self, master_key: MasterKey) -> None:
        self.key_id = master_key.key_id
        """The master key's fingerprint, stored beside each signature."""
        self._master = master_key.key
        self._derived: bytes | None = None

    @property
    def _key(self) -> bytes:
        """The signing key, derived at the first signature: cryptography's OpenSSL bindings (~7 MiB)
        load then, not with the gateway (a pass-through process appends nothing;
        tests/cli/test_serve_footprint.py)."""
        if self._derived is None:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF

            hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=SIGNING_INFO)
            self._derived = hkdf.derive(self._master)
        return self._derived

    def sign(self, org_id: str, seq: int, chain_hash: str) -> str:
        """The hex HMAC-SHA256 of (org_id, seq, hash)."""
        return hmac.new(self._key, _position(org_id, seq, chain_hash), hashlib.sha256).hexdigest()

    def check(self, org_id: str, seq: int, chain_hash: str, key_id: str, signature: str) -> bool | None:
        """Whether ``signature`` is this key's over the position; None when another master key made it
        (it cannot be checked here, which says nothing about forgery)."""
        if key_id != self.key_id:
            return None
        return hmac.compare_digest(self.sign(org_id, seq, chain_hash), str(signature))
