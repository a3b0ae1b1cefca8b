"""What the audit tests share: a master key, trails over a database, and rows to tamper with."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, update

from hatchway.audit import AuditEvent, AuditTrail
from hatchway.audit.store import AuditEntryRow
from hatchway.config.access import AuditSettings
from hatchway.store.db import Database
from hatchway.vault.master_key import MasterKey
from tests.support.backends import fresh_pg_database

TrailFactory = Callable[..., AuditTrail]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Like ``database_url``, but the PostgreSQL database is this test's alone (it reads every trail)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        return
    with fresh_pg_database("hatchway_audit") as url:
        yield url


@pytest.fixture
def master_key() -> MasterKey:
    return MasterKey.generate("test")


@pytest.fixture
def make_trail(master_key: MasterKey) -> TrailFactory:
    """``make_trail(db, checkpoint_every=5, key=…, clock=…)``: a trail over ``db``."""

    def make(db: Database, *, checkpoint_every: int = 5, key: Any = master_key, **options: Any) -> AuditTrail:
        return AuditTrail(db, key, AuditSettings(checkpoint_every=checkpoint_every), **options)

    return make


def new_org() -> str:
    return f"org_{uuid.uuid4().hex[:16]}"


def event(org_id: str, n: int, **changes: Any) -> AuditEvent:
    """The ``n``-th test event of an organisation."""
    fields: dict[str, Any] = {
        "org_id": org_id,
        "actor": "key:key_test",
        "action": "limit.set",
        "target": f"limit_{n}",
        "source": "127.0.0.1",
        "request_id": f"req_{n}",
        "detail": {"n": n, "tokens_per_minute": 1000},
    }
    return AuditEvent(**(fields | changes))


async def record_many(trail: AuditTrail, org_id: str, count: int) -> None:
    for n in range(1, count + 1):
        await trail.record(event(org_id, n))


async def edit_entry(db: Database, org_id: str, seq: int, /, **values: Any) -> None:
    """Change a stored entry's columns behind the trail's back."""
    async with db.session() as s:
        await s.execute(
            update(AuditEntryRow)
            .where(AuditEntryRow.org_id == org_id, AuditEntryRow.seq == seq)
            .values(**values)
        )


async def delete_entry(db: Database, org_id: str, seq: int) -> None:
    async with db.session() as s:
        await s.execute(delete(AuditEntryRow).where(AuditEntryRow.org_id == org_id, AuditEntryRow.seq == seq))


async def swap_seqs(db: Database, org_id: str, a: int, b: int) -> None:
    """Swap two entries' places (through a free seq: (org_id, seq) is the primary key)."""
    for old, new in ((a, -1), (b, a), (-1, b)):
        await edit_entry(db, org_id, old, seq=new)
