"""Which queued responses the requeue pass checks against the job queue: those with a stored request
left untouched for ``older_than`` seconds, oldest first, a batch at a time; each batch is marked as
checked, so a backlog larger than the batch is gone through in turns. Of those, it queues again each
one whose job is missing or has ended, and leaves alone each one whose job waits or runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from saq.job import Status

from hatchway.config.settings import Settings
from hatchway.ids import new_id
from hatchway.responses.queue import ResponseQueue
from hatchway.responses.requeue import requeue_stranded
from hatchway.responses.store import ResponseJobRecord, ResponseRecord, ResponseStore
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from tests.support.backends import REDIS_URL
from tests.support.replicas import unique_redis_prefix

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


@pytest.fixture
async def queue() -> AsyncIterator[ResponseQueue]:
    """The job queue on the real Redis, under a prefix of this test's (its keys deleted after)."""
    if not REDIS_URL:
        pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
    prefix = unique_redis_prefix()
    settings = Settings.model_validate(
        {"providers": [{"id": "u", "base_url": "http://127.0.0.1:9/v1"}], "redis_url": REDIS_URL}
        | {"redis_prefix": prefix}
    )
    running = ResponseQueue(settings)
    yield running
    redis = running.queue.redis
    keys = [key async for key in redis.scan_iter(match=f"saq:*{prefix}*", count=500)]
    if keys:
        await redis.delete(*keys)
    await running.close()


@pytest.mark.redis
async def test_a_queued_response_whose_job_ended_or_is_gone_is_queued_again_once(
    sqlite_db: Database, queue: ResponseQueue
) -> None:
    store = ResponseStore(sqlite_db, owner="replica-a")
    failed, complete, waiting, lost = [await stored(store, "queued", 300) for _ in range(4)]
    for response_id in (failed, complete, waiting):
        assert await queue.enqueue("org_1", response_id)
    for response_id, status in ((failed, Status.FAILED), (complete, Status.COMPLETE)):
        job = await queue.queue.dequeue()  # taken by a worker (first in, first out)…
        assert job is not None and job.key == response_id
        await queue.queue.finish(job, status, error="attempts spent")  # …and ended; SAQ keeps it a while

    assert await requeue_stranded(store, queue, after_seconds=30) == 3
    for response_id in (failed, complete, lost):
        job = await queue.job(response_id)
        assert job is not None and (job.status, job.attempts) == (Status.QUEUED, 0)
    assert not await queue.enqueue("org_1", waiting)  # its job waits: never doubled
    assert await queue.queue.count("queued") == 4  # three queued again, and the one that waited
