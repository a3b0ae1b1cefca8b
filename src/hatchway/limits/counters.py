"""The counts behind ``limits:``: per-minute windows and concurrency slots, taken all at once or not
at all, on Redis across replicas or in this process (docs/limits.md, "Across replicas").

A window is a moving window of buckets (a sixtieth of ``limits.window_seconds`` each): its count is
exact (every request and token is in it until its bucket slides out, at most one bucket late), and
a reservation is reconciled in the bucket it was counted in, up or down. A slot is a lease with its
own expiry, so the slots of a replica that died free themselves.

Written here rather than with the ``limits`` library: that library counts one limit per call (on
Redis, a round trip per limit and another to read what is left for the headers), cannot give a
reservation back, and its in-process storage schedules an expiry task on every hit; a request checks
up to eight limits at once and must be refused by all of them or none. So one Redis script takes
every slot and window of a request (one round trip), another gives them back, and the in-process
counts are the same arithmetic with no await between the check and the update.

Every wait on Redis is bounded (``bounded``): a Redis that refuses, hangs or errs is
``CountsUnavailable``, and the limiter applies ``limits.on_redis_failure`` (docs/reliability.md,
"Limits when Redis fails").
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

BUCKETS_PER_WINDOW = 60
_KEPT_IN_PROCESS = 10_000
"""Reservations of queued runs kept in process (without Redis), the oldest forgotten past it."""

T = TypeVar("T")


class CountsUnavailable(Exception):
    """Redis did not answer the limits: refused, timed out or failed (the message says which)."""


async def bounded(call: Awaitable[T], seconds: float) -> T:
    """``call`` to Redis, waited for at most ``seconds``; any failure is ``CountsUnavailable``."""
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError:
        raise CountsUnavailable(f"no answer within {seconds:g} s") from None
    except Exception as exc:
        from redis.exceptions import RedisError  # loaded already: the client raised it

        if isinstance(exc, RedisError | OSError):
            raise CountsUnavailable(type(exc).__name__) from exc
        raise


@dataclass(frozen=True, slots=True)
class Slot:
    """Concurrency slots under ``key``: at most ``limit`` leases."""

    key: str
    limit: int


@dataclass(frozen=True, slots=True)
class Window:
    """A moving window under ``key`` (its bucket width part of it): at most ``limit`` counted."""

    key: str
    limit: int


@dataclass(slots=True)
class Taken:
    """What ``take`` did: ``refused`` is the index (slots first, then windows) of the first that did
    not fit, None when all were taken; ``counts`` and ``resets`` are each window's after it (before
    it, on a refusal): its count and the seconds until its oldest bucket slides out."""

    refused: int | None
    bucket: int
    counts: list[int] = field(default_factory=list)
    resets: list[float] = field(default_factory=list)


def bucket_ms(window_seconds: float) -> int:
    """A bucket's width; a window is ``BUCKETS_PER_WINDOW`` of them (its length rounded to that)."""
    return max(1, round(window_seconds * 1000 / BUCKETS_PER_WINDOW))


# A window on Redis is a hash: one field per bucket (its index) with its count, ``t`` the total and
# ``o`` the oldest bucket that may hold a count. Sliding it walks from ``o`` to the first bucket still
# in the window, so it costs what slid out since the last call (a whole idle window: one DEL), never a
# read of every bucket.
_SLIDE = """
local function slide(key, first_alive, current, buckets)
  local v = redis.call('HMGET', key, 't', 'o')
  local total, oldest = tonumber(v[1]) or 0, tonumber(v[2])
  if total <= 0 or oldest == nil then return 0, current end
  if first_alive - oldest > buckets then
    redis.call('DEL', key)
    return 0, current
  end
  while oldest <= current do
    local c = tonumber(redis.call('HGET', key, oldest) or '0')
    if oldest < first_alive then
      if c ~= 0 then total = total - c redis.call('HDEL', key, oldest) end
    elseif c > 0 then break end
    oldest = oldest + 1
  end
  if oldest > current or total <= 0 then total, oldest = 0, current end
  redis.call('HSET', key, 't', total, 'o', oldest)
  return total, oldest
end
local function add(key, total, current, cost, ttl)
  redis.call('HINCRBY', key, current, cost)
  if total <= 0 then redis.call('HSET', key, 'o', current) end
  redis.call('HINCRBY', key, 't', cost)
  redis.call('PEXPIRE', key, ttl)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
# KEYS: the slots' lease sets, then the windows. ARGV: lease, lease seconds, number of slots, window
# ms, bucket ms, each slot's limit, each window's limit and cost. Every expired lease and bucket is
# dropped, every slot and window checked, and only when all fit is anything added. Times are
# Redis's own clock, the same for every replica.
_TAKE = (
    _SLIDE
    + """
local lease, lease_s, nslots = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local window, bucket = tonumber(ARGV[4]), tonumber(ARGV[5])
local buckets = window / bucket
local current = math.floor(now / bucket)
local first_alive = math.floor((now - window) / bucket)
local refused = 0
for i = 1, nslots do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if refused == 0 and redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[5 + i]) then refused = i end
end
local base = 5 + nslots
local out = {0, current}
local totals = {}
for j = nslots + 1, #KEYS do
  local h = j - nslots
  local limit, cost = tonumber(ARGV[base + 2 * h - 1]), tonumber(ARGV[base + 2 * h])
  local total, oldest = slide(KEYS[j], first_alive, current, buckets)
  totals[h] = total
  if refused == 0 and total + cost > limit then refused = j end
  out[#out + 1] = total
  out[#out + 1] = (oldest + 1) * bucket + window - now
end
if refused > 0 then out[1] = refused return out end
for i = 1, nslots do
  redis.call('ZADD', KEYS[i], now + lease_s * 1000, lease)
  redis.call('PEXPIRE', KEYS[i], math.ceil(lease_s * 1000))
end
for j = nslots + 1, #KEYS do
  local h = j - nslots
  local cost = tonumber(ARGV[base + 2 * h])
  if cost > 0 then
    add(KEYS[j], totals[h], current, cost, window + 2 * bucket)
    out[2 * h + 1] = out[2 * h + 1] + cost
  end
end
return out
"""
)
# KEYS: the slots' lease sets, then windows. ARGV: lease, number of slots, window ms, bucket ms, the
# bucket the request was counted in, each window's change. A change down is made in that bucket if
# it is still in the window (never below zero); a change up, in the current bucket.
_GIVE_BACK = (
    _SLIDE
    + """
local nslots = tonumber(ARGV[2])
for i = 1, nslots do redis.call('ZREM', KEYS[i], ARGV[1]) end
local window, bucket = tonumber(ARGV[3]), tonumber(ARGV[4])
local current = math.floor(now / bucket)
local first_alive = math.floor((now - window) / bucket)
for j = nslots + 1, #KEYS do
  local delta = tonumber(ARGV[5 + j - nslots])
  local total, oldest = slide(KEYS[j], first_alive, current, window / bucket)
  if delta > 0 then
    add(KEYS[j], total, current, delta, window + 2 * bucket)
  elseif delta < 0 and tonumber(ARGV[5]) >= oldest then
    local counted = tonumber(redis.call('HGET', KEYS[j], ARGV[5]) or '0')
    local back = math.min(counted, -delta)
    if back > 0 then
      redis.call('HINCRBY', KEYS[j], ARGV[5], -back)
      redis.call('HINCRBY', KEYS[j], 't', -back)
    end
  end
end
return 1
"""
)


class RedisCounters:
    """Counts shared by every replica on one Redis; each call waits at most ``timeout`` seconds."""

    def __init__(self, client: Any, prefix: str, lease_seconds: float, timeout: float = 0.5) -> None:
        self._client = client
        self._prefix = prefix
        self._lease_seconds = lease_seconds
        self._timeout = timeout
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)

    async def take(
        self, lease: str, slots: Sequence[Slot], windows: Sequence[Window], costs: Sequence[int], width: int
    ) -> Taken:
        """Take a lease of every slot and count ``costs`` in ``windows`` (buckets of ``width`` ms),
        all of them or none."""
        keys = [f"{self._prefix}slots:{s.key}" for s in slots] + [self._prefix + w.key for w in windows]
        args: list[Any] = [lease, self._lease_seconds, len(slots), width * BUCKETS_PER_WINDOW, width]
        args += [s.limit for s in slots]
        for window, cost in zip(windows, costs, strict=True):
            args += [window.limit, cost]
        out = [int(v) for v in await bounded(self._take(keys=keys, args=args), self._timeout)]
        stats = out[2:]
        return Taken(
            out[0] - 1 if out[0] else None,
            out[1],
            stats[0::2],
            [max(ms, 0) / 1000 for ms in stats[1::2]],
        )

    async def give_back(
        self, lease: str, slots: Sequence[str], windows: Sequence[str], delta: int, bucket: int, width: int
    ) -> None:
        """Free ``lease``'s slots and change ``windows`` by ``delta``: down in ``bucket``, up now."""
        if not slots and not (windows and delta):
            return
        windows = windows if delta else ()
        keys = [f"{self._prefix}slots:{s}" for s in slots] + [self._prefix + w for w in windows]
        args = [lease, len(slots), width * BUCKETS_PER_WINDOW, width, bucket]
        await bounded(self._give_back(keys=keys, args=args + [delta] * len(windows)), self._timeout)

    async def keep(self, lease: str, reserved: int, bucket: int) -> None:
        """Keep what ``lease`` reserved, and in which bucket, for whoever ends its run (``held``)."""
        value = f"{reserved}:{bucket}"
        expiry = math.ceil(self._lease_seconds)
        await bounded(self._client.set(f"{self._prefix}held:{lease}", value, ex=expiry), self._timeout)

    async def held(self, lease: str) -> tuple[int, int] | None:
        """What ``keep`` kept for ``lease`` (reserved tokens, bucket), once; None if nothing was."""
        key = f"{self._prefix}held:{lease}"
        pipe = self._client.pipeline(transaction=True).get(key).delete(key)  # GETDEL before Redis 6.2
        raw, _ = await bounded(pipe.execute(), self._timeout)
        if raw is None:
            return None
        reserved, _, bucket = raw.decode().partition(":")
        return int(reserved), int(bucket)


class _Window:
    """One window in process: its buckets, oldest first, and their sum."""

    __slots__ = ("buckets", "total", "width")

    def __init__(self, width: int) -> None:
        self.buckets: deque[list[int]] = deque()  # [bucket, count]
        self.total = 0
        self.width = width

    def slide(self, now_ms: float) -> None:
        """Drop the buckets that ended a whole window ago."""
        first_alive = int((now_ms - self.width * BUCKETS_PER_WINDOW) // self.width)
        while self.buckets and self.buckets[0][0] < first_alive:
            self.total -= self.buckets.popleft()[1]

    def add(self, bucket: int, amount: int) -> None:
        if self.buckets and self.buckets[-1][0] == bucket:
            self.buckets[-1][1] += amount
        else:
            self.buckets.append([bucket, amount])
        self.total += amount

    def take_back(self, bucket: int, amount: int) -> None:
        for entry in self.buckets:
            if entry[0] == bucket:
                taken = min(entry[1], amount)
                entry[1] -= taken
                self.total -= taken
                return


class MemoryCounters:
    """This process's counts (no ``redis_url``): the same arithmetic as the Redis scripts, with no
    await between a check and its update, so it is atomic on the event loop."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._slots: dict[str, set[str]] = {}
        self._windows: dict[str, _Window] = {}
        self._sweep_at = 1024
        self._kept: OrderedDict[str, tuple[int, int]] = OrderedDict()

    async def take(
        self, lease: str, slots: Sequence[Slot], windows: Sequence[Window], costs: Sequence[int], width: int
    ) -> Taken:
        now = self._clock() * 1000
        current = int(now // width)
        taken = Taken(None, current)
        for i, slot in enumerate(slots):
            held = self._slots.get(slot.key)
            if held is not None and len(held) >= slot.limit:
                taken.refused = i
                break
        counted = []
        for i, window in enumerate(windows):
            w = self._windows.get(window.key)
            if w is None:
                w = self._windows[window.key] = _Window(width)
            w.slide(now)
            counted.append(w)
            if taken.refused is None and w.total + costs[i] > window.limit:
                taken.refused = len(slots) + i
            oldest = w.buckets[0][0] if w.buckets else current
            taken.resets.append(max((oldest + 1 + BUCKETS_PER_WINDOW) * width - now, 0) / 1000)
        if taken.refused is None:
            for slot in slots:
                self._slots.setdefault(slot.key, set()).add(lease)
            for w, cost in zip(counted, costs, strict=True):
                if cost > 0:
                    w.add(current, cost)
        taken.counts = [w.total for w in counted]
        if len(self._windows) > self._sweep_at:
            self._sweep(now)
        return taken

    async def give_back(
        self, lease: str, slots: Sequence[str], windows: Sequence[str], delta: int, bucket: int, width: int
    ) -> None:
        for key in slots:
            held = self._slots.get(key)
            if held is not None:
                held.discard(lease)
                if not held:
                    del self._slots[key]
        for key in windows if delta else ():
            if delta > 0:
                if (w := self._windows.get(key)) is None:
                    w = self._windows[key] = _Window(width)
                w.add(int(self._clock() * 1000 // width), delta)
            elif (w := self._windows.get(key)) is not None:
                w.take_back(bucket, -delta)

    async def keep(self, lease: str, reserved: int, bucket: int) -> None:
        self._kept[lease] = (reserved, bucket)
        while len(self._kept) > _KEPT_IN_PROCESS:
            self._kept.popitem(last=False)

    async def held(self, lease: str) -> tuple[int, int] | None:
        return self._kept.pop(lease, None)

    def _sweep(self, now_ms: float) -> None:
        """Forget the windows that slid empty: what is kept is bounded by the subjects seen in one
        window, and a sweep costs no more than the windows made since the last one."""
        for w in self._windows.values():
            w.slide(now_ms)
        for key in [k for k, w in self._windows.items() if not w.buckets]:
            del self._windows[key]
        self._sweep_at = max(1024, 2 * len(self._windows))
