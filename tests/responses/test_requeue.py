"""Which queued responses the requeue pass checks against the job queue: those with a stored request
left untouched for ``older_than`` seconds, oldest first, a batch at a time; each batch is marked as
checked, so a backlog larger than the batch is gone through in turns."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hatchway.ids import new_id
from hatchway.responses.store import ResponseJobRecord, ResponseRecord, ResponseStore
from hatchway.store.db import Database
from hatchway.store.tables import utcnow

pytestmark = pytest.mark.anyio


async def stored(store: ResponseStore, status: str, age_seconds: float, *, job: bool = True) -> str:
    record = ResponseRecord(
        id=new_id("resp"),
        org_id="org_1",
        status=status,
        model="gpt-4o",
        background=True,
        updated_at=utcnow() - timedelta(seconds=age_seconds),
    )
    await store.create(record, [], job=ResponseJobRecord(response_id=record.id, body={}) if job else None)
    return record.id


async def test_stale_queued_responses_are_checked_oldest_first_in_turns(db: Database) -> None:
    store = ResponseStore(db, owner="replica-a")
    oldest, older, old = [await stored(store, "queued", age) for age in (300, 200, 100)]
    await stored(store, "queued", 1)  # queued just now: its job may not be written yet
    await stored(store, "queued", 300, job=False)  # run in process: no job to lose
    await stored(store, "completed", 300)

    assert await store.stale_queued(30, limit=2) == [("org_1", oldest), ("org_1", older)]
    assert await store.stale_queued(30, limit=2) == [("org_1", old)]  # the first two were just checked
    assert await store.stale_queued(30, limit=2) == []
    assert (await store.get("org_1", oldest)).status == "queued"
