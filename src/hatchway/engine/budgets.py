"""Spend budgets of ``limits:`` (``budget_usd_per_day`` / ``budget_usd_per_month``): what a scope has
spent in the current UTC day or month, counted as runs settle (docs/limits.md, "Budgets").

A period's count starts from the request log (the sum of its records' ``cost_usd`` since the
period began), so a restart or a replica that joins late starts where the others are; from then on
each settled run adds its tree's cost. On Redis the count is one key per scope and period, shared by
the replicas (``INCRBYFLOAT``, atomic); without Redis it is this process's. A budget is checked
before a run starts: a run in progress is never cut off, so a budget can be passed by the runs
that were in flight when it was reached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

Period = Literal["day", "month"]


@dataclass(frozen=True, slots=True)
class Window:
    """One UTC day or month."""

    label: str
    """``d2026-12-02`` or ``m2026-12``: part of the count's key."""
    start: datetime
    end: datetime

    def seconds_left(self, now: datetime) -> float:
        return max((self.end - now).total_seconds(), 0.0)


def window(period: Period, now: datetime | None = None) -> Window:
    now = now or datetime.now(UTC)
    if period == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return Window(f"d{start:%Y-%m-%d}", start, start + timedelta(days=1))
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Window(f"m{start:%Y-%m}", start, end)


Seed = Callable[[datetime], Awaitable[float]]
"""What a scope spent since a time, read from the request log."""

# KEYS[1]: the count. ARGV: the seed, its expiry in seconds. Set only if absent, then read.
_SEED = """
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
return redis.call('GET', KEYS[1])
"""
# KEYS[1]: the count. ARGV: the amount. Added only to a count that exists: one that does not is
# seeded from the request log, which then holds the run that settles.
_ADD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBYFLOAT', KEYS[1], ARGV[1]) end
return false
"""


class RedisSpend:
    def __init__(self, client: Any, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._seed = client.register_script(_SEED)
        self._add = client.register_script(_ADD)

    async def spent(self, key: str, seed: Seed, period: Window) -> float:
        full = f"{self._prefix}{key}:{period.label}"
        value = await self._client.get(full)
        if value is None:
            ttl = int((period.end - period.start).total_seconds()) + 3600
            value = await self._seed(keys=[full], args=[repr(await seed(period.start)), ttl])
        return float(value)

    async def add(self, key: str, amount: float, period: Window) -> None:
        await self._add(keys=[f"{self._prefix}{key}:{period.label}"], args=[repr(amount)])


class MemorySpend:
    """This process's counts, at most ``max_counts`` of them: one evicted (the least recently used)
    is read from the request log again when next needed, so a flood of end users costs reads, not memory."""

    def __init__(self, max_counts: int = 10_000) -> None:
        self._spent: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._max = max_counts

    async def spent(self, key: str, seed: Seed, period: Window) -> float:
        slot = (key, period.label)
        if slot not in self._spent:
            value = await seed(period.start)
            self._spent.setdefault(slot, value)
            while len(self._spent) > self._max:
                self._spent.popitem(last=False)
        self._spent.move_to_end(slot)
        return self._spent[slot]

    async def add(self, key: str, amount: float, period: Window) -> None:
        slot = (key, period.label)
        if slot in self._spent:
            self._spent[slot] += amount
