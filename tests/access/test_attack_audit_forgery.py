"""Attacks: someone who can write the database but does not hold the master key rewrites the audit
trail of a live gateway, and ``hatchway audit verify`` (a real process) must fail.

docs/access.md: "Someone who can write the database but does not hold the master key can recompute the
hashes, but not the signatures: the chain then fails at the head or the last checkpoint."
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
from sqlalchemy import delete, update

from hatchway.audit import AuditTrail
from hatchway.audit.chain import entry_hash
from hatchway.audit.store import AuditCheckpoint, AuditEntryRow, AuditHead
from hatchway.config.access import AuditSettings
from hatchway.store.db import Database
from tests.support.cli import run
from tests.support.gateway import RunningGateway


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method, f"{gateway.url}{path}", headers={"authorization": f"Bearer {key}"}, timeout=60, **kw
    )


def _verify(gateway: RunningGateway) -> tuple[int, str]:
    done = run(["audit", "verify", "--config", str(gateway.config_path)], gateway.config_path.parent)
    return done.returncode, done.stdout + done.stderr


def _admin_session(gateway: RunningGateway) -> list[str]:
    """Some keys made through the admin API (each a ``key.create`` entry); returns their ids."""
    assert gateway.org is not None
    made = []
    for name in ("ci", "reader", "backdoor"):
        answer = _http(
            gateway,
            gateway.key,
            "POST",
            f"/v1/admin/orgs/{gateway.org.org_name}/keys",
            json={"name": name, "role": "admin"},
        )
        assert answer.status_code == 201, answer.text
        made.append(answer.json()["id"])
    return made


async def _rewrite(database_url: str, org_id: str, target: str, **changes: Any) -> str:
    """Edit the entry whose target is ``target`` and re-hash every entry after it (no master key
    needed); the new hash of the last entry."""
    db = Database(database_url)
    try:
        entries = await AuditTrail(db, None, AuditSettings()).list(org_id, limit=1000)
        index = next(i for i, e in enumerate(entries) if e.target == target)
        prev = entries[index - 1].hash if index else entries[0].prev_hash
        for entry in entries[index:]:
            forged = dataclasses.replace(entry, prev_hash=prev, **(changes if entry.target == target else {}))
            prev = entry_hash(forged.to_dict())
            async with db.session() as s:
                await s.execute(
                    update(AuditEntryRow)
                    .where(AuditEntryRow.org_id == org_id, AuditEntryRow.seq == entry.seq)
                    .values(**{k: getattr(forged, k) for k in changes}, prev_hash=forged.prev_hash, hash=prev)
                )
        return prev
    finally:
        await db.close()


def test_a_head_resigned_under_an_invented_master_key_id_does_not_verify(gateway: RunningGateway) -> None:
    assert gateway.org is not None
    backdoor = _admin_session(gateway)[2]
    code, out = _verify(gateway)
    assert code == 0, out

    async def tamper() -> None:
        # the backdoor key's creation now reads as the CLI's, and the head claims a rotated-away key
        last = await _rewrite(
            gateway.settings.database_url,
            gateway.org.org_id,
            f"key:{backdoor}",
            actor="cli:root",  # type: ignore[union-attr]
        )
        db = Database(gateway.settings.database_url)
        try:
            async with db.session() as s:
                await s.execute(
                    update(AuditHead)
                    .where(AuditHead.org_id == gateway.org.org_id)  # type: ignore[union-attr]
                    .values(hash=last, key_id="0123456789abcdef", signature="0" * 64)
                )
                await s.execute(delete(AuditCheckpoint))
        finally:
            await db.close()

    asyncio.run(tamper())
    code, out = _verify(gateway)
    assert code == 1, f"a rewritten chain with a head 'signed' by an invented key id verifies:\n{out}"


def test_a_rewritten_tail_with_its_head_deleted_is_not_signed_again_by_the_next_append(
    gateway: RunningGateway,
) -> None:
    assert gateway.org is not None
    backdoor = _admin_session(gateway)[2]

    async def tamper() -> None:
        await _rewrite(
            gateway.settings.database_url,
            gateway.org.org_id,
            f"key:{backdoor}",
            actor="cli:root",  # type: ignore[union-attr]
        )
        db = Database(gateway.settings.database_url)
        try:
            async with db.session() as s:
                await s.execute(delete(AuditHead).where(AuditHead.org_id == gateway.org.org_id))  # type: ignore[union-attr]
        finally:
            await db.close()

    asyncio.run(tamper())
    code, out = _verify(gateway)
    assert code == 1, out  # head missing: found, as tests/audit/test_trail.py says
    # anyone's next audited action (here, a viewer key refused a route) makes the gateway sign the forgery
    viewer = _http(
        gateway,
        gateway.key,
        "POST",
        f"/v1/admin/orgs/{gateway.org.org_name}/keys",
        json={"name": "v", "role": "viewer"},
    ).json()["key"]
    assert _http(gateway, viewer, "GET", "/v1/secrets").status_code == 403
    code, out = _verify(gateway)
    assert code == 1, f"the gateway signed a head over a rewritten chain:\n{out}"


def test_a_cut_tail_with_its_head_deleted_is_not_signed_again_by_the_next_append(
    gateway: RunningGateway,
) -> None:
    assert gateway.org is not None
    _admin_session(gateway)  # the last entry: the backdoor key's creation

    async def tamper() -> None:
        db = Database(gateway.settings.database_url)
        try:
            entries = await AuditTrail(db, None, AuditSettings()).list(gateway.org.org_id)  # type: ignore[union-attr]
            async with db.session() as s:
                await s.execute(
                    delete(AuditEntryRow).where(
                        AuditEntryRow.org_id == gateway.org.org_id,  # type: ignore[union-attr]
                        AuditEntryRow.seq == entries[-1].seq,
                    )
                )
                await s.execute(delete(AuditHead).where(AuditHead.org_id == gateway.org.org_id))  # type: ignore[union-attr]
        finally:
            await db.close()

    asyncio.run(tamper())
    viewer = _http(
        gateway,
        gateway.key,
        "POST",
        f"/v1/admin/orgs/{gateway.org.org_name}/keys",
        json={"name": "v", "role": "viewer"},
    )
    assert viewer.status_code == 201
    code, out = _verify(gateway)
    assert code == 1, f"a chain cut at its tail verifies once the gateway appends again:\n{out}"
