"""The operator's ``limits:``: requests and tokens per minute, concurrent runs and spend budgets, per
organisation, API key, end user and agent, checked before a run starts (docs/limits.md, "Limits").

Windows are the ``limits`` library's: a moving window for requests (exact), a sliding-window counter
for tokens (an estimate across the minute boundary); one atomic Redis script per hit, so replicas
sharing ``redis_url`` share the count, in process without Redis. Concurrency is a set of leases, each
with its own expiry, so the slots of a replica that died free themselves. Budgets are
``engine/budgets.py``'s. hatchway.yaml's limits are overlaid by those set with ``hatchway limits set``
(``store/limit_overrides.py``), read again every ``limits.refresh_seconds``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from hatchway.config.settings import LimitsSettings, LimitValues, Settings
from hatchway.engine.budgets import MemorySpend, Period, RedisSpend, window
from hatchway.engine.context import Principal
from hatchway.errors import BudgetExceeded, ConcurrencyLimited, RateLimited, TokensLimited

logger = logging.getLogger(__name__)

Kind = Literal[
    "requests_per_minute",
    "tokens_per_minute",
    "concurrent_runs",
    "concurrent_background_runs",
    "budget_usd_per_day",
    "budget_usd_per_month",
]
KINDS: tuple[Kind, ...] = get_args(Kind)
_SLOTS: tuple[Kind, ...] = ("concurrent_runs", "concurrent_background_runs")
_WINDOWS: tuple[Kind, ...] = ("requests_per_minute", "tokens_per_minute")
_BUDGETS: dict[Kind, Period] = {"budget_usd_per_day": "day", "budget_usd_per_month": "month"}
_REFUSALS: dict[Kind, type[RateLimited]] = {
    "requests_per_minute": RateLimited,
    "tokens_per_minute": TokensLimited,
    "concurrent_runs": ConcurrencyLimited,
    "concurrent_background_runs": ConcurrencyLimited,
    "budget_usd_per_day": BudgetExceeded,
    "budget_usd_per_month": BudgetExceeded,
}
BYTES_PER_TOKEN = 4
"""A request's input tokens are estimated from its body size before the call (then counted)."""


@dataclass(frozen=True, slots=True)
class Requester:
    """Who a request is from and what it asks for: what decides which limits apply."""

    principal: Principal
    user: str | None = None
    """``X-On-Behalf-Of``."""
    agent: str | None = None
    """The agent's name, for a request to ``agent:<name>``."""
    background: bool = False
    """A background response (``concurrent_background_runs`` applies)."""

    @classmethod
    def of(cls, principal: Principal, user: str | None, model: str, *, background: bool = False) -> Requester:
        agent = model.removeprefix("agent:") if model.startswith("agent:") else None
        return cls(principal, user, agent, bool(background))


@dataclass(frozen=True, slots=True)
class AppliedLimit:
    """One limit of ``limits:`` as it applies to one request."""

    kind: Kind
    amount: float
    """A count, or USD for a budget."""
    param: str
    """Where it is set: ``limits.keys.<name>.requests_per_minute``."""
    subject: str
    """Whose count it is: ``org:<id>``, ``key:<id>``, ``user:<org id>:<user>``, ``agent:<org id>:<name>``."""
    org_id: str = ""
    group: str | None = None
    """Whose records a budget sums, as ``GET /v1/usage`` groups them: ``key``, ``user``, ``agent``
    (with ``name``), or None for the whole organisation."""
    name: str | None = None


def applied_limits(settings: LimitsSettings, who: Requester) -> list[AppliedLimit]:
    """Every limit that applies to ``who``, the narrowest scope first (end user, agent, key, organisation).

    The narrowest first: a request refused by its own key's limit is then not counted against its
    organisation (a window cannot be refunded), so one key at its limit does not eat its
    organisation's allowance.
    """
    org = who.principal
    out: list[AppliedLimit] = []
    if who.user is not None:
        out += _entry(
            settings.users,
            [who.user],
            "limits.users",
            f"user:{org.org_id}:{who.user}",
            org.org_id,
            ("user", who.user),
        )
    if who.agent is not None:
        out += _entry(
            settings.agents,
            [who.agent],
            "limits.agents",
            f"agent:{org.org_id}:{who.agent}",
            org.org_id,
            ("agent", who.agent),
        )
    if org.key_id is not None:
        names = [n for n in (org.key_name, org.key_id) if n]
        out += _entry(
            settings.keys, names, "limits.keys", f"key:{org.key_id}", org.org_id, ("key", org.key_id)
        )
    out += _organisation(settings, org)
    return out if who.background else [a for a in out if a.kind != "concurrent_background_runs"]


def _entry(
    table: dict[str, LimitValues],
    names: list[str],
    path: str,
    subject: str,
    org_id: str,
    group: tuple[str, str],
) -> list[AppliedLimit]:
    name = next((n for n in names if n in table), "*" if "*" in table else None)
    if name is None:
        return []
    return [
        AppliedLimit(kind, amount, f"{path}.{name}.{kind}", subject, org_id, *group)
        for kind in KINDS
        if (amount := getattr(table[name], kind)) is not None
    ]


def _organisation(settings: LimitsSettings, org: Principal) -> list[AppliedLimit]:
    name = next((n for n in (org.org_name, org.org_id) if n in settings.organisations), None)
    own = settings.organisations[name] if name is not None else LimitValues()
    out = []
    subject = f"org:{org.org_id}"
    for kind in KINDS:  # an organisation's entry overrides the defaults key by key
        if (amount := getattr(own, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.organisations.{name}.{kind}", subject, org.org_id))
        elif (amount := getattr(settings.defaults, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.defaults.{kind}", subject, org.org_id))
    return out


def configured(settings: LimitsSettings) -> bool:
    """Whether any limit is set at all (when none is, admission costs nothing)."""
    tables = [settings.defaults, *settings.organisations.values(), *settings.keys.values()]
    tables += [*settings.users.values(), *settings.agents.values()]
    return any(getattr(values, kind) is not None for values in tables for kind in KINDS)


def reserved_tokens(max_tokens: Any, body_bytes: int) -> int:
    """What a request reserves of a tokens-per-minute window before its call: its input estimated
    from the body size, plus the output it allows (``max_tokens``), when it says."""
    output = max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else 0
    return max(1, math.ceil(body_bytes / BYTES_PER_TOKEN) + max(output, 0))


# KEYS[1]: the subject's lease set. ARGV: limit, lease id, lease seconds. Expired leases (a replica
# that died holding them) are dropped first; the score is the lease's expiry on Redis's own clock.
_ACQUIRE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])))
return 1
"""


class RedisSlots:
    """Concurrency slots shared by replicas: one sorted set of leases per subject."""

    def __init__(self, client: Any, prefix: str, lease_seconds: float) -> None:
        self._client = client
        self._prefix = prefix
        self._lease_seconds = lease_seconds
        self._acquire = client.register_script(_ACQUIRE)

    async def acquire(self, subject: str, limit: int, lease: str) -> bool:
        keys = [f"{self._prefix}{subject}"]
        return bool(await self._acquire(keys=keys, args=[limit, lease, self._lease_seconds]))

    async def release(self, subject: str, lease: str) -> None:
        await self._client.zrem(f"{self._prefix}{subject}", lease)


class MemorySlots:
    """Concurrency slots of this process alone (no ``redis_url``)."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}

    async def acquire(self, subject: str, limit: int, lease: str) -> bool:
        held = self._held.setdefault(subject, set())  # no await between the check and the add: atomic
        if len(held) >= limit:
            return False
        held.add(lease)
        return True

    async def release(self, subject: str, lease: str) -> None:
        held = self._held.get(subject)
        if held is not None:
            held.discard(lease)
            if not held:
                del self._held[subject]


def _slot_key(limit: AppliedLimit) -> str:
    return limit.subject if limit.kind == "concurrent_runs" else f"{limit.subject}:background"


@dataclass(eq=False)
class Admission:
    """A request the limits let in: the headers to answer with, and what it holds until it ends."""

    headers: dict[str, str] = field(default_factory=dict)
    reserved: int = 0
    token_limits: list[AppliedLimit] = field(default_factory=list)
    slots: list[AppliedLimit] = field(default_factory=list)
    budgets: list[AppliedLimit] = field(default_factory=list)
    lease: str = ""


Overrides = Callable[[], Awaitable[LimitsSettings]]
"""hatchway.yaml's limits with those of ``hatchway limits set`` laid over them, read from the store."""
Seed = Callable[[AppliedLimit, Any], Awaitable[float]]
"""What a budget's scope spent since a time, read from the request log."""


class Limiter:
    """Applies hatchway.yaml's ``limits:`` (and ``hatchway limits set``'s) to the run routes' requests."""

    def __init__(
        self,
        settings: LimitsSettings,
        *,
        redis: Any = None,
        prefix: str = "hatchway:",
        lease_seconds: float = 3600.0,
        overrides: Overrides | None = None,
        spent_since: Seed | None = None,
    ) -> None:
        """``redis``: a ``redis.asyncio`` client shared by replicas (without it, counts are in process);
        ``lease_seconds``: how long a concurrency slot of a replica that died stays taken;
        ``overrides``: reads the limits to apply now (every ``settings.refresh_seconds``);
        ``spent_since``: where a budget's count starts (without it, at zero)."""
        self.settings = settings
        self._redis = redis
        self._prefix = prefix
        self._lease_seconds = lease_seconds
        self._overrides = overrides
        self._spent_since = spent_since
        self._storage: Any = None
        self.enabled = False
        self._apply(settings)

    def _apply(self, settings: LimitsSettings) -> None:
        self.settings = settings
        self.enabled = configured(settings)
        if self.enabled and self._storage is None:
            self._load()

    def _load(self) -> None:
        """The counters, made when a limit is first set (until then the library is not even loaded:
        the hot path's RSS)."""
        from limits.aio.storage import MemoryStorage, RedisStorage
        from limits.aio.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

        if self._redis is not None:
            storage: Any = RedisStorage(
                "async+redis://",
                implementation="redispy",
                key_prefix=f"{self._prefix}limits",
                connection_pool=self._redis.connection_pool,
            )
            self._slots: RedisSlots | MemorySlots = RedisSlots(
                self._redis, f"{self._prefix}limits:slots:", self._lease_seconds
            )
            self._spend: RedisSpend | MemorySpend = RedisSpend(self._redis, f"{self._prefix}limits:spend:")
        else:
            storage = MemoryStorage()
            self._slots = MemorySlots()
            self._spend = MemorySpend()
        self._storage = storage
        # Requests: a moving window, exact (one entry per request, at most requests_per_minute of
        # them); tokens: a sliding-window counter (a moving window would keep one entry per token),
        # whose count is an estimate weighted across the minute boundary.
        self._requests: Any = MovingWindowRateLimiter(storage)
        self._tokens: Any = SlidingWindowCounterRateLimiter(storage)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, overrides: Overrides | None = None, spent_since: Seed | None = None
    ) -> Limiter:
        """On the gateway's Redis (``redis_url``, ``redis_prefix``) when it has one."""
        redis = None
        if settings.redis_url:
            import redis.asyncio as aioredis

            redis = aioredis.Redis.from_url(settings.redis_url)
        # A lease outlives any run that could hold it: a replica that dies frees its slots then.
        deadline = settings.loop_deadline_seconds
        return cls(
            settings.limits,
            redis=redis,
            prefix=settings.redis_prefix,
            lease_seconds=deadline * 2 + 60,
            overrides=overrides,
            spent_since=spent_since,
        )

    async def refresh(self) -> None:
        """Read the limits to apply again (``hatchway limits set``'s); on a store error, keep the last."""
        if self._overrides is None:
            return
        try:
            self._apply(await self._overrides())
        except Exception as exc:  # the store is down: the limits last read still hold
            logger.warning("could not read the limits set with `hatchway limits set`: %s", type(exc).__name__)

    async def keep_refreshing(self) -> None:
        """``refresh`` every ``limits.refresh_seconds``, off the request path, until cancelled."""
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            await self.refresh()

    async def admit(self, who: Requester, *, reserve_tokens: int = 0, lease: str | None = None) -> Admission:
        """Count the request in every limit that applies, or raise ``RateLimited`` naming the first
        that refuses it (what it took of the others is given back where it can be: its slots).

        ``lease``: the id its concurrency slots are held under (a queued background response's id,
        so the worker that runs it can give them back)."""
        if not self.enabled:
            return Admission()
        applied = applied_limits(self.settings, who)
        if not applied:
            return Admission()
        admission = Admission(lease=lease or uuid.uuid4().hex, reserved=reserve_tokens)
        try:
            for limit in (a for a in applied if a.kind in _BUDGETS):
                await self._check_budget(limit)
                admission.budgets.append(limit)
            for limit in (a for a in applied if a.kind in _SLOTS):
                if not await self._slots.acquire(_slot_key(limit), int(limit.amount), admission.lease):
                    raise self._refusal(limit, "Too many runs in progress", retry_after=1)
                admission.slots.append(limit)
            for limit in (a for a in applied if a.kind in _WINDOWS):
                cost = 1 if limit.kind == "requests_per_minute" else reserve_tokens
                if not await self._window(limit).hit(self._item(limit), limit.subject, limit.kind, cost=cost):
                    raise self._refusal(limit, _why(limit, cost), retry_after=await self._reset_in(limit))
                if limit.kind == "tokens_per_minute":
                    admission.token_limits.append(limit)
        except RateLimited as refusal:
            await self._release_slots(admission)
            refusal.headers = {**await self._headers(applied), **refusal.headers}  # OpenAI's, on a 429 too
            raise
        except BaseException:
            await self._release_slots(admission)
            raise
        admission.headers = await self._headers(applied)
        return admission

    def held(self, who: Requester, lease: str, reserved: int = 0) -> Admission:
        """What a run admitted elsewhere holds under ``lease`` (a queued background response, run by
        a worker): settled by whoever ends the run."""
        if not self.enabled:
            return Admission()
        applied = applied_limits(self.settings, who)
        return Admission(
            reserved=reserved,
            token_limits=[a for a in applied if a.kind == "tokens_per_minute"],
            slots=[a for a in applied if a.kind in _SLOTS],
            budgets=[a for a in applied if a.kind in _BUDGETS],
            lease=lease,
        )

    async def settle(self, admission: Admission, used_tokens: int, cost_usd: float = 0.0) -> None:
        """The run ended: free its slots, count its cost in its budgets, and the tokens it used past
        what it reserved.

        A sliding window cannot be decremented, so a reservation larger than what was used stays
        counted (the window frees it when it slides); what was used past it is hit afterwards, and
        when that no longer fits, the window is filled: the next requests wait for it to slide.
        """
        await self._release_slots(admission)
        if not admission.lease:
            return
        for limit in admission.budgets if cost_usd > 0 else ():
            await self._spend.add(limit.subject, cost_usd, window(_BUDGETS[limit.kind]))
        extra = used_tokens - admission.reserved
        for limit in admission.token_limits if extra > 0 else ():
            item = self._item(limit)
            if not await self._window(limit).hit(item, limit.subject, limit.kind, cost=extra):
                stats = await self._window(limit).get_window_stats(item, limit.subject, limit.kind)
                if stats.remaining > 0:
                    await self._window(limit).hit(item, limit.subject, limit.kind, cost=stats.remaining)

    @asynccontextmanager
    async def admitted(
        self, who: Requester, *, reserve_tokens: int, used: Callable[[], tuple[int, float]]
    ) -> AsyncIterator[Admission]:
        """``admit`` and ``settle`` as one scope: settled with ``used()`` (tokens, USD) on every exit."""
        admission = await self.admit(who, reserve_tokens=reserve_tokens)
        try:
            yield admission
        finally:
            if admission.lease:
                await self.settle(admission, *used())

    def _window(self, limit: AppliedLimit) -> Any:
        return self._requests if limit.kind == "requests_per_minute" else self._tokens

    def _item(self, limit: AppliedLimit) -> Any:
        from limits import RateLimitItemPerSecond

        return RateLimitItemPerSecond(int(limit.amount), self.settings.window_seconds)

    async def _check_budget(self, limit: AppliedLimit) -> None:
        period = window(_BUDGETS[limit.kind])
        spent = await self._spend.spent(limit.subject, lambda since: self._seed(limit, since), period)
        if spent >= limit.amount:
            left = period.seconds_left(datetime.now(UTC))
            raise BudgetExceeded(
                f"Budget spent: {limit.param} is {limit.amount:g} USD and {spent:.6f} USD has been spent "
                f"this {_BUDGETS[limit.kind]}; it resets at {period.end:%Y-%m-%dT%H:%M:%SZ}.",
                param=limit.param,
                headers={
                    "retry-after": str(max(1, math.ceil(left))),
                    BUDGET_RESET_HEADER: f"{period.end:%Y-%m-%dT%H:%M:%SZ}",
                },
            )

    async def _seed(self, limit: AppliedLimit, since: Any) -> float:
        return 0.0 if self._spent_since is None else await self._spent_since(limit, since)

    async def close(self) -> None:
        timer = getattr(self._storage, "timer", None)
        if timer is not None and not timer.done():
            timer.cancel()
        if self._redis is not None:
            await self._redis.aclose()

    async def _release_slots(self, admission: Admission) -> None:
        held, admission.slots = admission.slots, []
        for limit in held:
            await self._slots.release(_slot_key(limit), admission.lease)

    async def _reset_in(self, limit: AppliedLimit) -> float:
        stats = await self._window(limit).get_window_stats(self._item(limit), limit.subject, limit.kind)
        return max(stats.reset_time - time.time(), 0.0)

    def _refusal(self, limit: AppliedLimit, why: str, *, retry_after: float) -> RateLimited:
        seconds = max(1, math.ceil(retry_after))
        return _REFUSALS[limit.kind](
            f"{why}: {limit.param} is {limit.amount:g}; retry after {seconds} s.",
            param=limit.param,
            headers={"retry-after": str(seconds)},
        )

    async def _headers(self, applied: list[AppliedLimit]) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers, for the tightest requests and tokens limit."""
        headers: dict[str, str] = {}
        for kind, suffix in (("requests_per_minute", "requests"), ("tokens_per_minute", "tokens")):
            tightest: tuple[int, float, AppliedLimit] | None = None
            for limit in (a for a in applied if a.kind == kind):
                stats = await self._window(limit).get_window_stats(
                    self._item(limit), limit.subject, limit.kind
                )
                remaining = max(stats.remaining, 0)
                if tightest is None or remaining < tightest[0]:
                    tightest = (remaining, stats.reset_time, limit)
            if tightest is not None:
                remaining, reset_time, limit = tightest
                headers[f"x-ratelimit-limit-{suffix}"] = str(int(limit.amount))
                headers[f"x-ratelimit-remaining-{suffix}"] = str(remaining)
                headers[f"x-ratelimit-reset-{suffix}"] = duration(max(reset_time - time.time(), 0.0))
        return headers


BUDGET_RESET_HEADER = "x-hatchway-budget-reset"
"""On a ``budget_exceeded`` refusal: when the budget's day or month ends (UTC, ISO 8601)."""


def _why(limit: AppliedLimit, cost: int) -> str:
    if limit.kind == "requests_per_minute":
        return "Too many requests"
    return f"This request's {cost} tokens (its max_tokens and input) do not fit"


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: ``20ms``, ``17s``, ``1m0s``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"
