"""The operator's ``limits:``: requests and tokens per minute and concurrent runs, per organisation,
API key, end user and agent, checked before a run starts (docs/limits.md, "Limits").

Windows are the ``limits`` library's: a moving window for requests (exact), a sliding-window counter
for tokens (an estimate across the minute boundary); one atomic Redis script per hit, so replicas
sharing ``redis_url`` share the count, in process without Redis. Concurrency is a set of leases, each
with its own expiry, so the slots of a replica that died free themselves.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from hatchway.config.settings import LimitsSettings, LimitValues, Settings
from hatchway.engine.context import Principal
from hatchway.errors import ConcurrencyLimited, RateLimited, TokensLimited

Kind = Literal["requests_per_minute", "tokens_per_minute", "concurrent_runs"]
KINDS: tuple[Kind, ...] = ("requests_per_minute", "tokens_per_minute", "concurrent_runs")
_REFUSALS: dict[Kind, type[RateLimited]] = {
    "requests_per_minute": RateLimited,
    "tokens_per_minute": TokensLimited,
    "concurrent_runs": ConcurrencyLimited,
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

    @classmethod
    def of(cls, principal: Principal, user: str | None, model: str) -> Requester:
        return cls(principal, user, model.removeprefix("agent:") if model.startswith("agent:") else None)


@dataclass(frozen=True, slots=True)
class AppliedLimit:
    """One limit of ``limits:`` as it applies to one request."""

    kind: Kind
    amount: int
    param: str
    """Where it is set: ``limits.keys.<name>.requests_per_minute``."""
    subject: str
    """Whose count it is: ``org:<id>``, ``key:<id>``, ``user:<org id>:<user>``, ``agent:<org id>:<name>``."""


def applied_limits(settings: LimitsSettings, who: Requester) -> list[AppliedLimit]:
    """Every limit that applies to ``who``, the narrowest scope first (end user, agent, key, organisation).

    The narrowest first: a request refused by its own key's limit is then not counted against its
    organisation (a window cannot be refunded), so one key at its limit does not eat its
    organisation's allowance.
    """
    org = who.principal
    out: list[AppliedLimit] = []
    if who.user is not None:
        out += _entry(settings.users, [who.user], "limits.users", f"user:{org.org_id}:{who.user}")
    if who.agent is not None:
        out += _entry(settings.agents, [who.agent], "limits.agents", f"agent:{org.org_id}:{who.agent}")
    if org.key_id is not None:
        names = [n for n in (org.key_name, org.key_id) if n]
        out += _entry(settings.keys, names, "limits.keys", f"key:{org.key_id}")
    out += _organisation(settings, org)
    return out


def _entry(table: dict[str, LimitValues], names: list[str], path: str, subject: str) -> list[AppliedLimit]:
    name = next((n for n in names if n in table), "*" if "*" in table else None)
    if name is None:
        return []
    return _limits_of(table[name], f"{path}.{name}", subject)


def _organisation(settings: LimitsSettings, org: Principal) -> list[AppliedLimit]:
    name = next((n for n in (org.org_name, org.org_id) if n in settings.organisations), None)
    own = settings.organisations[name] if name is not None else LimitValues()
    out = []
    for kind in KINDS:  # an organisation's entry overrides the defaults key by key
        if (amount := getattr(own, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.organisations.{name}.{kind}", f"org:{org.org_id}"))
        elif (amount := getattr(settings.defaults, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.defaults.{kind}", f"org:{org.org_id}"))
    return out


def _limits_of(values: LimitValues, path: str, subject: str) -> list[AppliedLimit]:
    return [
        AppliedLimit(kind, amount, f"{path}.{kind}", subject)
        for kind in KINDS
        if (amount := getattr(values, kind)) is not None
    ]


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
        self._held: dict[str, int] = {}

    async def acquire(self, subject: str, limit: int, lease: str) -> bool:
        held = self._held.get(subject, 0)  # no await between the check and the count: atomic
        if held >= limit:
            return False
        self._held[subject] = held + 1
        return True

    async def release(self, subject: str, lease: str) -> None:
        held = self._held.get(subject, 0) - 1
        if held > 0:
            self._held[subject] = held
        else:
            self._held.pop(subject, None)


@dataclass(eq=False)
class Admission:
    """A request the limits let in: the headers to answer with, and what it holds until it ends."""

    headers: dict[str, str] = field(default_factory=dict)
    reserved: int = 0
    token_limits: list[AppliedLimit] = field(default_factory=list)
    slots: list[AppliedLimit] = field(default_factory=list)
    lease: str = ""


class Limiter:
    """Applies hatchway.yaml's ``limits:`` to the requests of the run routes."""

    def __init__(
        self,
        settings: LimitsSettings,
        *,
        redis: Any = None,
        prefix: str = "hatchway:",
        lease_seconds: float = 3600.0,
    ) -> None:
        """``redis``: a ``redis.asyncio`` client shared by replicas (without it, counts are in process);
        ``lease_seconds``: how long a concurrency slot of a replica that died stays taken."""
        self.settings = settings
        self.enabled = configured(settings)
        self._redis = redis
        self._storage: Any = None
        if not self.enabled:  # nothing to count: the library is not even loaded (the hot path's RSS)
            return
        from limits.aio.storage import MemoryStorage, RedisStorage
        from limits.aio.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

        if redis is not None:
            storage: Any = RedisStorage(
                "async+redis://",
                implementation="redispy",
                key_prefix=f"{prefix}limits",
                connection_pool=redis.connection_pool,
            )
            self._slots: RedisSlots | MemorySlots = RedisSlots(redis, f"{prefix}limits:slots:", lease_seconds)
        else:
            storage = MemoryStorage()
            self._slots = MemorySlots()
        self._storage = storage
        # Requests: a moving window, exact (one entry per request, at most requests_per_minute of
        # them); tokens: a sliding-window counter (a moving window would keep one entry per token),
        # whose count is an estimate weighted across the minute boundary.
        self._requests: Any = MovingWindowRateLimiter(storage)
        self._tokens: Any = SlidingWindowCounterRateLimiter(storage)

    @classmethod
    def from_settings(cls, settings: Settings) -> Limiter:
        """On the gateway's Redis (``redis_url``, ``redis_prefix``) when it has one."""
        redis = None
        if settings.redis_url and configured(settings.limits):
            import redis.asyncio as aioredis

            redis = aioredis.Redis.from_url(settings.redis_url)
        # A lease outlives any run that could hold it: a replica that dies frees its slots then.
        lease_seconds = settings.loop_deadline_seconds * 2 + 60
        return cls(settings.limits, redis=redis, prefix=settings.redis_prefix, lease_seconds=lease_seconds)

    async def admit(self, who: Requester, *, reserve_tokens: int = 0) -> Admission:
        """Count the request in every limit that applies, or raise ``RateLimited`` naming the first
        that refuses it (what it took of the others is given back where it can be: its slots)."""
        if not self.enabled:
            return Admission()
        applied = applied_limits(self.settings, who)
        if not applied:
            return Admission()
        admission = Admission(lease=uuid.uuid4().hex, reserved=reserve_tokens)
        try:
            for limit in (a for a in applied if a.kind == "concurrent_runs"):
                if not await self._slots.acquire(limit.subject, limit.amount, admission.lease):
                    raise self._refusal(limit, "Too many runs in progress", retry_after=1)
                admission.slots.append(limit)
            for limit in (a for a in applied if a.kind != "concurrent_runs"):
                cost = 1 if limit.kind == "requests_per_minute" else reserve_tokens
                if not await self._window(limit).hit(_item(limit), limit.subject, limit.kind, cost=cost):
                    raise self._refusal(limit, _why(limit, cost), retry_after=await self._reset_in(limit))
                if limit.kind == "tokens_per_minute":
                    admission.token_limits.append(limit)
        except BaseException:
            await self._release_slots(admission)
            raise
        admission.headers = await self._headers(applied)
        return admission

    async def settle(self, admission: Admission, used_tokens: int) -> None:
        """The run ended: free its slots, and count the tokens it used past what it reserved.

        A sliding window cannot be decremented, so a reservation larger than what was used stays
        counted (the window frees it when it slides); what was used past it is hit afterwards, and
        when that no longer fits, the window is filled: the next requests wait for it to slide.
        """
        await self._release_slots(admission)
        extra = used_tokens - admission.reserved
        for limit in admission.token_limits if extra > 0 else ():
            item = _item(limit)
            if not await self._window(limit).hit(item, limit.subject, limit.kind, cost=extra):
                stats = await self._window(limit).get_window_stats(item, limit.subject, limit.kind)
                if stats.remaining > 0:
                    await self._window(limit).hit(item, limit.subject, limit.kind, cost=stats.remaining)

    @asynccontextmanager
    async def admitted(
        self, who: Requester, *, reserve_tokens: int, used_tokens: Callable[[], int]
    ) -> AsyncIterator[Admission]:
        """``admit`` and ``settle`` as one scope: settled with ``used_tokens()`` on every exit."""
        admission = await self.admit(who, reserve_tokens=reserve_tokens)
        try:
            yield admission
        finally:
            if admission.lease:
                await self.settle(admission, used_tokens())

    def _window(self, limit: AppliedLimit) -> Any:
        return self._requests if limit.kind == "requests_per_minute" else self._tokens

    async def close(self) -> None:
        timer = getattr(self._storage, "timer", None)
        if timer is not None and not timer.done():
            timer.cancel()
        if self._redis is not None:
            await self._redis.aclose()

    async def _release_slots(self, admission: Admission) -> None:
        held, admission.slots = admission.slots, []
        for limit in held:
            await self._slots.release(limit.subject, admission.lease)

    async def _reset_in(self, limit: AppliedLimit) -> float:
        stats = await self._window(limit).get_window_stats(_item(limit), limit.subject, limit.kind)
        return max(stats.reset_time - time.time(), 0.0)

    def _refusal(self, limit: AppliedLimit, why: str, *, retry_after: float) -> RateLimited:
        seconds = max(1, math.ceil(retry_after))
        return _REFUSALS[limit.kind](
            f"{why}: {limit.param} is {limit.amount}; retry after {seconds} s.",
            param=limit.param,
            headers={"retry-after": str(seconds)},
        )

    async def _headers(self, applied: list[AppliedLimit]) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-*`` headers, for the tightest requests and tokens limit."""
        headers: dict[str, str] = {}
        for kind, suffix in (("requests_per_minute", "requests"), ("tokens_per_minute", "tokens")):
            tightest: tuple[int, float, AppliedLimit] | None = None
            for limit in (a for a in applied if a.kind == kind):
                stats = await self._window(limit).get_window_stats(_item(limit), limit.subject, limit.kind)
                remaining = max(stats.remaining, 0)
                if tightest is None or remaining < tightest[0]:
                    tightest = (remaining, stats.reset_time, limit)
            if tightest is not None:
                remaining, reset_time, limit = tightest
                headers[f"x-ratelimit-limit-{suffix}"] = str(limit.amount)
                headers[f"x-ratelimit-remaining-{suffix}"] = str(remaining)
                headers[f"x-ratelimit-reset-{suffix}"] = duration(max(reset_time - time.time(), 0.0))
        return headers


def _item(limit: AppliedLimit) -> Any:
    from limits import RateLimitItemPerMinute

    return RateLimitItemPerMinute(limit.amount)


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
