"""Spend budgets of ``limits:`` (``budget_usd_per_day`` / ``budget_usd_per_month``): what a scope has
spent in the current UTC day or month, counted as runs settle (docs/limits.md, "Budgets").

A period's count starts from the request log (the sum of its records' ``cost_usd`` since the
period began), so a restart or a replica that joins late starts where the others are; from then on
each settled run adds its tree's cost. On Redis the count is one hash per scope and period, shared
by the replicas (``HINCRBYFLOAT``, atomic); without Redis it is this process's. A budget is checked
before a run starts: a run in progress is never cut off, so a budget can be passed by the runs
that were in flight when it was reached.

A run settles before its record reaches the log (the record is written after its scope closes, in
batches), so a count read from the log can miss the runs that just settled. On Redis a count
therefore starts *provisional*: the runs that settle while it is missing or provisional are also
kept by record id (``pending``), and ``final_after`` seconds later — once the records in flight
when it started are in the log — it is read from the log again, without those records, plus what
they cost. A count a settle could not reach (Redis down) is made provisional again (``stale``).
So after a Redis restart or outage the count is the log's sum again (docs/limits.md, "Budgets").
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from hatchway.limits.counters import bounded

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


Seed = Callable[[datetime, Sequence[str]], Awaitable[float]]
"""What a scope spent since a time, read from the request log, leaving out the records named."""

_NOW = """
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
"""
# A count is a hash: ``t`` the USD spent, ``final_at`` (Redis ms) when a provisional count is read
# from the log again (0: final). ``pending``: record ids (of a run tree, comma-separated) → USD.
# KEYS: count, pending. Returns {0, t} for a count to use as it is, or {1 (provisional, due) or 2
# (missing), t, the pending fields...} for one to read from the log.
_READ = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 't', 'final_at')
local final_at = tonumber(v[2]) or 0
if v[1] and (final_at == 0 or now < final_at) then return {0, v[1]} end
local out = {v[1] and 1 or 2, v[1] or '0'}
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do out[#out + 1] = f end
return out
"""
)
# KEYS: count, pending. ARGV: the log's sum without the pending records, final_after ms, TTL s.
# Provisional when missing; final when due. Another replica may have seeded it meanwhile: kept.
_SEED = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 't', 'final_at')
local final_at = tonumber(v[2]) or 0
if v[1] and (final_at == 0 or now < final_at) then return v[1] end
local total = tonumber(ARGV[1])
for _, usd in ipairs(redis.call('HVALS', KEYS[2])) do total = total + tonumber(usd) end
if v[1] then
  redis.call('HSET', KEYS[1], 't', total, 'final_at', 0)
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[1], 't', total, 'final_at', now + tonumber(ARGV[2]))
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return tostring(total)
"""
)
# KEYS: count, pending, held. ARGV: the budget, USD to hold, the hold's lease, how long it is held
# (ms), TTL s. Like _READ for a count to read from the log; else {0} when the run is let in (its
# estimate held under its lease) or {3, t, held} when the count and the holds of the runs in flight
# reach the budget. A hold expires (a replica that died before it settled its run).
_TAKE = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 't', 'final_at')
local final_at = tonumber(v[2]) or 0
if not (v[1] and (final_at == 0 or now < final_at)) then
  local out = {v[1] and 1 or 2, v[1] or '0'}
  for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do out[#out + 1] = f end
  return out
end
local held = 0
local entries = redis.call('HGETALL', KEYS[3])
for i = 1, #entries, 2 do
  local usd, expires = string.match(entries[i + 1], '^([^|]+)|(%d+)$')
  if not expires or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[3], entries[i])
  else
    held = held + tonumber(usd)
  end
end
if tonumber(v[1]) + held >= tonumber(ARGV[1]) then return {3, v[1], tostring(held)} end
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[2] .. '|' .. tostring(now + tonumber(ARGV[4])))
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
return {0}
"""
)
# KEYS: count, pending, held. ARGV: USD, the run's record ids, TTL s, the run's lease. Added to a
# count that exists; kept by record ids too while the count is missing or provisional; the run's
# hold is given back.
_ADD = """
redis.call('HDEL', KEYS[3], ARGV[4])
local v = redis.call('HMGET', KEYS[1], 't', 'final_at')
if v[1] then redis.call('HINCRBYFLOAT', KEYS[1], 't', ARGV[1]) end
if not v[1] or (tonumber(v[2]) or 0) ~= 0 then
  redis.call('HINCRBYFLOAT', KEYS[2], ARGV[2], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
end
return 1
"""
# KEYS: count. ARGV: final_after ms. A count that may miss a run is read from the log again once
# that run's record is there.
_STALE = (
    _NOW
    + """
local v = redis.call('HMGET', KEYS[1], 't', 'final_at')
if not v[1] then return 0 end
local at = math.max(tonumber(v[2]) or 0, now + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'final_at', at)
return 1
"""
)


class RedisSpend:
    """Counts shared by the replicas; each call to Redis waits at most ``timeout`` seconds.

    ``final_after``: how long after a count starts (or goes stale) it is read from the log again:
    longer than a settled run's record takes to reach the log."""

    def __init__(self, client: Any, prefix: str, *, final_after: float = 11.25, timeout: float = 0.5) -> None:
        self._client = client
        self._prefix = prefix
        self._final_after_ms = max(0, round(final_after * 1000))
        self._timeout = timeout
        self._read = client.register_script(_READ)
        self._seed = client.register_script(_SEED)
        self._add = client.register_script(_ADD)
        self._stale = client.register_script(_STALE)
        self._take = client.register_script(_TAKE)

    def _keys(self, key: str, period: Window) -> list[str]:
        count = f"{self._prefix}{key}:{period.label}:count"
        return [count, f"{count}:pending", f"{count}:held"]

    async def spent(self, key: str, seed: Seed, period: Window) -> float:
        """What the scope spent this period (the holds of runs in flight left out)."""
        keys = self._keys(key, period)
        state, total, *pending = await bounded(self._read(keys=keys[:2], args=[]), self._timeout)
        if int(state) == 0:
            return float(total)
        return await self._seeded(keys, seed, period, pending)

    async def _seeded(self, keys: list[str], seed: Seed, period: Window, pending: Sequence[bytes]) -> float:
        excluded = [i for field in pending for i in field.decode().split(",") if i]
        spent = await seed(period.start, excluded)
        args = [repr(spent), self._final_after_ms, _ttl(period)]
        return float(await bounded(self._seed(keys=keys[:2], args=args), self._timeout))

    async def take(
        self, key: str, seed: Seed, period: Window, *, budget: float, hold: Hold
    ) -> tuple[float, float] | None:
        """Let a run in while what the scope spent and the runs in flight hold is below ``budget``,
        holding ``hold.usd`` for it (None); else what was spent and what is held (refused)."""
        keys = self._keys(key, period)
        args = [repr(budget), repr(hold.usd), hold.lease, round(hold.seconds * 1000), _ttl(period)]
        for _ in range(2):  # a count to read from the log first is read, then taken again
            state, *rest = await bounded(self._take(keys=keys, args=args), self._timeout)
            if int(state) == 0:
                return None
            if int(state) == 3:
                return float(rest[0]), float(rest[1])
            await self._seeded(keys, seed, period, rest[1:])
        return None  # seeded twice and still due (final_after 0): let in as a plain count would

    async def add(
        self, key: str, amount: float, period: Window, records: Sequence[str] = (), lease: str = ""
    ) -> None:
        """``records``: the ids of the run log records ``amount`` is the cost of; ``lease``: the run's,
        whose hold is given back."""
        ids = ",".join(records) or f"run:{uuid.uuid4().hex}"
        args = [repr(amount), ids, _ttl(period), lease]
        await bounded(self._add(keys=self._keys(key, period), args=args), self._timeout)

    async def release(self, key: str, period: Window, lease: str) -> None:
        """Give back the hold of a run that cost nothing (or was refused by another limit)."""
        await bounded(self._client.hdel(self._keys(key, period)[2], lease), self._timeout)

    async def stale(self, key: str, period: Window) -> None:
        """The count may miss a run that could not be added: read it from the log again later."""
        count = self._keys(key, period)[0]
        await bounded(self._stale(keys=[count], args=[self._final_after_ms]), self._timeout)


def _ttl(period: Window) -> int:
    return int((period.end - period.start).total_seconds()) + 3600


@dataclass(frozen=True, slots=True)
class Hold:
    """What a run admitted holds of its budgets until it settles: its estimated cost, under its lease,
    for at most ``seconds`` (then a replica that died with it in flight no longer holds it)."""

    usd: float
    lease: str
    seconds: float


class MemorySpend:
    """This process's counts, at most ``max_counts`` of them: one evicted (the least recently used)
    is read from the request log again when next needed, so a flood of end users costs reads, not memory.
    The holds of the runs in flight are kept apart (a run settles in this process, or it died with it)."""

    def __init__(self, max_counts: int = 10_000) -> None:
        self._spent: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._held: dict[tuple[str, str], dict[str, float]] = {}
        self._max = max_counts

    async def spent(self, key: str, seed: Seed, period: Window) -> float:
        slot = (key, period.label)
        if slot not in self._spent:
            value = await seed(period.start, ())
            self._spent.setdefault(slot, value)
            while len(self._spent) > self._max:
                self._spent.popitem(last=False)
        self._spent.move_to_end(slot)
        return self._spent[slot]

    async def take(
        self, key: str, seed: Seed, period: Window, *, budget: float, hold: Hold
    ) -> tuple[float, float] | None:
        spent = await self.spent(key, seed, period)
        slot = (key, period.label)
        held = sum(self._held.get(slot, {}).values())
        if spent + held >= budget:
            return spent, held
        if hold.usd > 0:
            self._held.setdefault(slot, {})[hold.lease] = hold.usd
        return None

    async def add(
        self, key: str, amount: float, period: Window, records: Sequence[str] = (), lease: str = ""
    ) -> None:
        slot = (key, period.label)
        await self.release(key, period, lease)
        if slot in self._spent:
            self._spent[slot] += amount

    async def release(self, key: str, period: Window, lease: str) -> None:
        slot = (key, period.label)
        held = self._held.get(slot)
        if held is not None:
            held.pop(lease, None)
            if not held:
                del self._held[slot]

    async def stale(self, key: str, period: Window) -> None:
        """Never: this process's counts cannot be unreachable."""
