"""A budget's count on real Redis against a run log the test writes: a run is counted once whether
its record reached the log before or after the count was read from it (docs/limits.md, "Budgets")."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import pytest

from hatchway.limits.budgets import Hold, MemorySpend, RedisSpend, window
from tests.support.backends import REDIS_URL

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.redis,
    pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL"),
]
DAY = window("day")


class RunLog:
    """Records by id and their cost; ``spent_since`` is the seed ``RedisSpend`` reads."""

    def __init__(self) -> None:
        self.records: dict[str, float] = {}

    async def spent_since(self, since: datetime, excluded: Sequence[str]) -> float:
        return sum(cost for record, cost in self.records.items() if record not in excluded)


@pytest.fixture
async def client() -> AsyncIterator[object]:
    import redis.asyncio as aioredis

    redis = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"hatchway-test-spend-{uuid.uuid4().hex[:8]}:"
    try:
        yield redis, prefix
    finally:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


def _spend(client: object, final_after: float) -> RedisSpend:
    redis, prefix = client  # type: ignore[misc]
    return RedisSpend(redis, prefix, final_after=final_after)


async def test_runs_settled_around_the_read_of_the_log_are_counted_once(client: object) -> None:
    log = RunLog()
    log.records["old"] = 2.0
    spend = _spend(client, final_after=0)  # a provisional count is read again at its next read
    # Settled while the count is missing (just after a Redis restart), its records not in the log yet.
    await spend.add("key:k", 5.0, DAY, ["a", "a-child"])
    assert await spend.spent("key:k", log.spent_since, DAY) == 7.0  # provisional
    # Settled while the count is provisional; only a's records reach the log before it is read again.
    await spend.add("key:k", 3.0, DAY, ["b"])
    log.records.update({"a": 4.0, "a-child": 1.0})
    assert await spend.spent("key:k", log.spent_since, DAY) == 10.0  # final: a from the log, b kept
    log.records["b"] = 3.0
    await spend.add("key:k", 1.0, DAY, ["c"])  # to the final count
    log.records["c"] = 1.0
    assert await spend.spent("key:k", log.spent_since, DAY) == 11.0


async def test_a_stale_count_is_read_from_the_log_again(client: object) -> None:
    log = RunLog()
    spend = _spend(client, final_after=0)
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.0  # provisional
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.0  # final
    log.records["lost"] = 5.0  # a run whose settle could not reach Redis: only in the log
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.0
    await spend.stale("key:k", DAY)
    await spend.add("key:k", 1.0, DAY, ["meanwhile"])  # kept: its record is not in the log yet
    assert await spend.spent("key:k", log.spent_since, DAY) == 6.0


async def test_a_count_stays_provisional_until_its_records_can_be_in_the_log(client: object) -> None:
    log = RunLog()
    spend = _spend(client, final_after=60)
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.0
    log.records["landed"] = 5.0  # in flight when the count was read
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.0  # not read again before a minute


async def test_the_holds_of_runs_in_flight_count_until_they_settle_or_expire(client: object) -> None:
    log = RunLog()
    log.records["old"] = 2.0
    spend = _spend(client, final_after=60)
    budget = 5.0
    # Admitted while spent and held stay below the budget, each holding its estimate.
    assert await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(2.0, "a", 60)) is None
    assert await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(2.0, "b", 60)) is None
    assert await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(2.0, "c", 60)) == (
        2.0,
        4.0,
    )
    await spend.add("key:k", 0.5, DAY, ["a-record"], lease="a")  # a cost less than it held
    await spend.release("key:k", DAY, "b")  # b was refused by another limit
    assert await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(2.5, "d", 0.2)) is None
    assert await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(0.1, "e", 60)) == (
        2.5,
        2.5,
    )
    # d's replica died with it in flight: its hold expires, the next run is let in.
    deadline = asyncio.get_running_loop().time() + 10
    while await spend.take("key:k", log.spent_since, DAY, budget=budget, hold=Hold(0.1, "f", 60)) is not None:
        assert asyncio.get_running_loop().time() < deadline, "the dead run's hold never expired"
        await asyncio.sleep(0.05)
    assert await spend.spent("key:k", log.spent_since, DAY) == 2.5  # holds are never spend


async def test_a_memory_count_holds_the_same_way() -> None:
    log = RunLog()
    spend = MemorySpend()
    assert await spend.take("key:k", log.spent_since, DAY, budget=1.0, hold=Hold(0.6, "a", 60)) is None
    assert await spend.take("key:k", log.spent_since, DAY, budget=1.0, hold=Hold(0.6, "b", 60)) is None
    assert await spend.take("key:k", log.spent_since, DAY, budget=1.0, hold=Hold(0.6, "c", 60)) == (0.0, 1.2)
    await spend.add("key:k", 0.1, DAY, ["a"], lease="a")
    await spend.release("key:k", DAY, "b")
    assert await spend.take("key:k", log.spent_since, DAY, budget=1.0, hold=Hold(0.6, "c", 60)) is None
    assert await spend.spent("key:k", log.spent_since, DAY) == 0.1
