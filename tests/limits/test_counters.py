"""The windows and slots behind ``limits:``, in process and on real Redis: all of a request's taken
or none, a reservation reconciled both ways, and a window that slides."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from hatchway.limits.counters import MemoryCounters, RedisCounters, Slot, Window, bucket_ms
from tests.support.backends import REDIS_URL

WIDTH = bucket_ms(60.0)
"""The width of a bucket of a one-minute window, in ms."""


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def counters(request: pytest.FixtureRequest) -> AsyncIterator[MemoryCounters | RedisCounters]:
    if request.param == "memory":
        yield MemoryCounters()
        return
    if not REDIS_URL:
        pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"hatchway-test-counters-{uuid.uuid4().hex[:8]}:"
    try:
        yield RedisCounters(client, prefix, lease_seconds=30)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.mark.anyio
async def test_a_request_is_counted_in_all_its_limits_or_in_none(
    counters: MemoryCounters | RedisCounters,
) -> None:
    narrow, wide = Window("requests:key:k", 2), Window("requests:org:o", 3)
    slot = Slot("org:o", 5)
    for _ in range(2):
        taken = await counters.take(uuid.uuid4().hex, [slot], [narrow, wide], [1, 1], WIDTH)
        assert taken.refused is None
    assert taken.counts == [2, 2]
    refused = await counters.take("third", [slot], [narrow, wide], [1, 1], WIDTH)
    assert refused.refused == 1  # the key's window (slots come first)
    assert refused.counts == [2, 2] and 0 < refused.resets[0] <= 61
    # The refused request took nothing: the organisation's window has room for one more, and a
    # slot refusal likewise leaves the windows as they were.
    other_key = await counters.take("fourth", [], [Window("requests:key:k2", 2), wide], [1, 1], WIDTH)
    assert other_key.refused is None and other_key.counts == [1, 3]
    k3 = Window("requests:key:k3", 9)
    assert (await counters.take("fifth", [Slot("org:o", 2)], [k3], [1], WIDTH)).refused == 0  # 2 held
    assert (await counters.take("sixth", [], [k3], [1], WIDTH)).counts == [1]


@pytest.mark.anyio
async def test_a_reservation_is_reconciled_up_and_down(counters: MemoryCounters | RedisCounters) -> None:
    tokens = Window("tokens:org:o", 100)
    taken = await counters.take("a", [Slot("org:o", 1)], [tokens], [60], WIDTH)
    assert taken.refused is None and taken.counts == [60]
    assert (await counters.take("b", [Slot("org:o", 1)], [], [], WIDTH)).refused == 0  # slot held
    await counters.give_back("a", ["org:o"], [tokens.key], -50, taken.bucket, WIDTH)  # used 10 of 60
    assert (await counters.take("c", [], [tokens], [90], WIDTH)).counts == [100]
    await counters.give_back("c", [], [tokens.key], 5, taken.bucket, WIDTH)  # used 95 of 90
    assert (await counters.take("d", [], [tokens], [0], WIDTH)).counts == [105]
    assert (await counters.take("e", [Slot("org:o", 1)], [], [], WIDTH)).refused is None  # slot freed


@pytest.mark.anyio
async def test_a_window_slides(counters: MemoryCounters | RedisCounters) -> None:
    width = 10  # a window of 600 ms
    window = Window("requests:user:o:ana", 2)
    assert (await counters.take("a", [], [window], [1], width)).refused is None
    assert (await counters.take("b", [], [window], [1], width)).refused is None
    refused = await counters.take("c", [], [window], [1], width)
    assert refused.refused == 0 and refused.resets[0] <= 0.62
    started = time.monotonic()
    with anyio.fail_after(5):
        while (await counters.take("d", [], [window], [1], width)).refused is not None:
            await anyio.sleep(0.01)
    assert time.monotonic() - started >= refused.resets[0] - 0.05  # not before it said


@pytest.mark.anyio
async def test_a_slot_lease_of_a_replica_that_died_expires() -> None:
    if not REDIS_URL:
        pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    prefix = f"hatchway-test-counters-{uuid.uuid4().hex[:8]}:"
    counters = RedisCounters(client, prefix, lease_seconds=0.3)
    try:
        assert (await counters.take("dead", [Slot("org:o", 1)], [], [], WIDTH)).refused is None
        assert (await counters.take("next", [Slot("org:o", 1)], [], [], WIDTH)).refused == 0
        with anyio.fail_after(5):
            while (await counters.take("next", [Slot("org:o", 1)], [], [], WIDTH)).refused is not None:
                await anyio.sleep(0.05)
    finally:
        await client.delete(*[k async for k in client.scan_iter(match=f"{prefix}*")] or ["-"])
        await client.aclose()


@pytest.mark.anyio
async def test_in_process_windows_that_slid_empty_are_forgotten() -> None:
    now = [1_000_000.0]
    counters = MemoryCounters(clock=lambda: now[0])
    for i in range(3000):  # 3,000 end users, one request each
        await counters.take(str(i), [], [Window(f"requests:user:o:{i}", 5)], [1], WIDTH)
    now[0] += 62  # every window has slid out
    for i in range(3000, 6000):
        await counters.take(str(i), [], [Window(f"requests:user:o:{i}", 5)], [1], WIDTH)
    assert len(counters._windows) < 4000
