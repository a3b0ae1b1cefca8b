"""What the limits do about a Redis that fails: count and log the failures (``Failures``), and put
right, once Redis answers again, what the settles could not do meanwhile (``Repairs``)
(docs/reliability.md, "Limits when Redis fails").

A settle that cannot reach Redis leaves two things wrong: the concurrency slots it held (taken
until their lease expires: up to twice ``loop_deadline_seconds`` plus a minute) and the budgets it
could not count. ``Repairs`` keeps both, bounded, and the limiter's refresh loop gives the slots
back and makes those budgets' counts read the run log again (``RedisSpend.stale``). Tokens are not
repaired: a give-back that timed out may have been applied, and a window slides out within a minute.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from hatchway.limits.counters import CountsUnavailable

logger = logging.getLogger(__name__)

LOG_EVERY_SECONDS = 60.0
"""At most one warning a minute while Redis keeps failing (with the count since the last)."""
MAX_KEPT = 10_000
"""Slots and budget counts kept for repair; past it the oldest are left to their lease's expiry
(a slot) or to the next outage's repair (a budget)."""


class Failures:
    """Redis failures of the limits: each reported (``on_failure``: a metric), logged at most once
    a minute, and the recovery logged once."""

    def __init__(self, on_failure: Callable[[str, str], None] | None = None) -> None:
        self._on_failure = on_failure
        self.count = 0
        """Failures since Redis last answered."""
        self._next_log = 0.0

    def failed(self, step: str, outcome: str, exc: CountsUnavailable) -> None:
        self.count += 1
        if self._on_failure is not None:
            self._on_failure(step, outcome)
        now = time.monotonic()
        if now >= self._next_log:
            logger.warning(
                "Redis did not answer the limits (%s): %d failures since it last answered, the "
                "latest at %s (%s); see docs/reliability.md, 'Limits when Redis fails'",
                exc,
                self.count,
                step,
                outcome,
            )
            self._next_log = now + LOG_EVERY_SECONDS

    def answered(self) -> None:
        if self.count:
            logger.warning("Redis answers the limits again, after %d failures", self.count)
            self.count = 0
            self._next_log = 0.0


class _Counters(Protocol):
    async def give_back(
        self, lease: str, slots: Sequence[str], windows: Sequence[str], delta: int, bucket: int, width: int
    ) -> None: ...


class _Spend(Protocol):
    async def stale(self, key: str, period: Any) -> None: ...


class Repairs:
    """Slots to give back and budget counts to read again, once Redis answers."""

    def __init__(self, counters: _Counters, spend: _Spend, failures: Failures) -> None:
        self._counters = counters
        self._spend = spend
        self._failures = failures
        self._slots: OrderedDict[str, Sequence[str]] = OrderedDict()
        self._counts: OrderedDict[tuple[str, Any], None] = OrderedDict()

    def later(self, lease: str, slots: Sequence[str], counts: Sequence[tuple[str, Any]]) -> None:
        """``lease``'s ``slots`` to give back, ``counts`` (subject, period) to read from the log again."""
        if slots:
            self._slots[lease] = slots
        for count in counts:
            self._counts[count] = None
        for kept in (self._slots, self._counts):
            while len(kept) > MAX_KEPT:
                kept.popitem(last=False)

    @property
    def pending(self) -> int:
        return len(self._slots) + len(self._counts)

    async def run(self) -> None:
        """Do what was kept, oldest first; stop at the first failure (kept for the next run)."""
        if not self.pending:
            return
        try:
            while self._slots:
                lease, slots = next(iter(self._slots.items()))
                await self._counters.give_back(lease, slots, (), 0, 0, 1)
                del self._slots[lease]
            while self._counts:
                subject, period = next(iter(self._counts))
                await self._spend.stale(subject, period)
                del self._counts[subject, period]
        except CountsUnavailable:
            return
        self._failures.answered()
