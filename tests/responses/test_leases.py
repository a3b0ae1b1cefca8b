"""A response's lease is renewed only while its run lives in the process that owns it: a response whose
run is gone without an ending — its task ended, or its replica died — reaches ``failed`` within the
lease, instead of staying ``in_progress`` for as long as the replica lives."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hatchway.ids import new_id
from hatchway.responses.leases import RUN_LOST
from hatchway.responses.store import ResponseRecord, ResponseStore
from hatchway.store.db import Database

pytestmark = pytest.mark.anyio
LEASE = 0.3


def in_progress() -> ResponseRecord:
    return ResponseRecord(id=new_id("resp"), org_id="org_1", status="in_progress", model="gpt-4o")


async def heartbeats(
    stores: list[tuple[ResponseStore, list[str]]], until: Callable[[], Awaitable[bool]], seconds: float
) -> bool:
    """Beat every store's heartbeat (renew what it runs, fail what expired) until ``until()`` holds or
    ``seconds`` have passed; whether it held."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        for store, running in stores:
            await store.renew_leases(running)
            await store.fail_expired(RUN_LOST)
        if await until():
            return True
        await asyncio.sleep(LEASE / 6)
    return False


def status_is(store: ResponseStore, record: ResponseRecord, status: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await store.get("org_1", record.id)).status == status

    return check


async def test_only_responses_whose_run_lives_keep_their_lease(db: Database) -> None:
    store = ResponseStore(db, owner="replica-a", lease_seconds=LEASE)
    alive, orphan = in_progress(), in_progress()
    for record in (alive, orphan):
        await store.create(record, [])

    assert await heartbeats([(store, [alive.id])], status_is(store, orphan, "failed"), seconds=10)

    assert (await store.get("org_1", alive.id)).status == "in_progress"
    assert (await store.get("org_1", orphan.id)).error["hatchway_code"] == "interrupted"


async def test_another_replicas_running_response_is_kept_until_that_replica_stops_renewing(
    db: Database,
) -> None:
    mine, theirs = (ResponseStore(db, owner=o, lease_seconds=LEASE) for o in ("replica-a", "replica-b"))
    record = in_progress()
    await theirs.create(record, [])

    both = [(mine, [record.id]), (theirs, [record.id])]  # the id is not mine to renew: no effect
    assert not await heartbeats(both, status_is(mine, record, "failed"), seconds=LEASE * 4)
    assert await heartbeats([(mine, [record.id])], status_is(mine, record, "failed"), seconds=10)
