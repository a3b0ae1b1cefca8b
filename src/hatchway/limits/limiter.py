"""The operator's ``limits:``: requests and tokens per minute, concurrent runs and spend budgets, per
organisation, API key, end user and agent, checked before a run starts (docs/limits.md, "Limits").

Which limits apply is ``limits/scopes.py``'s; the windows and slots are counted by
``limits/counters.py`` (on the gateway's Redis when it has one, so replicas share the count;
in process without), all of a request's at once; budgets are ``limits/budgets.py``'s.
hatchway.yaml's limits are overlaid by those set with ``hatchway limits set``
(``store/limit_overrides.py``), read again every ``limits.refresh_seconds``.

When Redis fails (refuses, hangs past ``limits.redis_timeout_seconds``, errs), a request is let in
unchecked or refused with 503 as ``limits.on_redis_failure`` says, and a settle never raises: what
it could not give back is given back by the refresh loop once Redis answers, and the budgets it
could not count are read from the run log again (docs/reliability.md, "Limits when Redis fails").
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hatchway.config.settings import LimitsSettings, Settings
from hatchway.errors import BudgetExceeded, ConcurrencyLimited, LimitsUnavailable, RateLimited, TokensLimited
from hatchway.limits.budgets import Hold, MemorySpend, Period, RedisSpend, window
from hatchway.limits.budgets import Window as BudgetWindow
from hatchway.limits.counters import (
    CountsUnavailable,
    MemoryCounters,
    RedisCounters,
    Slot,
    Taken,
    Window,
    bucket_ms,
)
from hatchway.limits.repairs import Failures, Repairs
from hatchway.limits.scopes import AppliedLimit, CostEstimate, Kind, Requester, applied_limits, configured

logger = logging.getLogger(__name__)

_SLOTS: tuple[Kind, ...] = ("concurrent_runs", "concurrent_background_runs")
_WINDOWS: tuple[Kind, ...] = ("requests_per_minute", "tokens_per_minute")
_BUDGETS: dict[Kind, Period] = {"budget_usd_per_day": "day", "budget_usd_per_month": "month"}
_REFUSALS: dict[Kind, type[RateLimited]] = {
    "requests_per_minute": RateLimited,
    "tokens_per_minute": TokensLimited,
    "concurrent_runs": ConcurrencyLimited,
    "concurrent_background_runs": ConcurrencyLimited,
}


def _slot_key(limit: AppliedLimit) -> str:
    return limit.subject if limit.kind == "concurrent_runs" else f"{limit.subject}:background"


def _window_key(limit: AppliedLimit, width: int) -> str:
    return f"w{width}:{limit.kind}:{limit.subject}"  # a bucket's index depends on its width


@dataclass(frozen=True, slots=True)
class _Plan:
    """The limits that apply to one requester, laid out for ``admit`` (worked out once per settings)."""

    slots: tuple[AppliedLimit, ...]
    slot_counts: tuple[Slot, ...]
    windows: tuple[AppliedLimit, ...]
    window_counts: tuple[Window, ...]
    token_windows: tuple[str, ...]
    """The keys of ``windows`` that count tokens (the others count requests)."""
    budgets: tuple[AppliedLimit, ...]
    requests: tuple[int, ...]
    """The indexes in ``windows`` of the requests windows, then of the tokens ones: for the headers."""
    tokens: tuple[int, ...]

    @classmethod
    def of(cls, applied: list[AppliedLimit], width: int) -> _Plan:
        slots = tuple(a for a in applied if a.kind in _SLOTS)
        windows = tuple(a for a in applied if a.kind in _WINDOWS)
        return cls(
            slots,
            tuple(Slot(_slot_key(a), int(a.amount)) for a in slots),
            windows,
            tuple(Window(_window_key(a, width), int(a.amount)) for a in windows),
            tuple(_window_key(a, width) for a in windows if a.kind == "tokens_per_minute"),
            tuple(a for a in applied if a.kind in _BUDGETS),
            tuple(i for i, a in enumerate(windows) if a.kind == "requests_per_minute"),
            tuple(i for i, a in enumerate(windows) if a.kind == "tokens_per_minute"),
        )

    def costs(self, reserve_tokens: int) -> list[int]:
        return [1 if a.kind == "requests_per_minute" else reserve_tokens for a in self.windows]


_NOTHING = _Plan((), (), (), (), (), (), (), ())
_PLANS_KEPT = 10_000
"""Requesters whose plan is kept between two changes of the limits (then they are all forgotten)."""


@dataclass(eq=False)
class Admission:
    """A request the limits let in: the headers to answer with, and what it holds until it ends."""

    headers: dict[str, str] = field(default_factory=dict)
    reserved: int = 0
    token_windows: tuple[str, ...] = ()
    slots: list[str] = field(default_factory=list)
    budgets: list[AppliedLimit] = field(default_factory=list)
    held: list[tuple[str, BudgetWindow]] = field(default_factory=list)
    """The budgets (subject, day or month) holding an estimate of its cost until it settles."""
    lease: str = ""
    bucket: int = 0
    """The windows' bucket the request was counted in (where its reservation is reconciled)."""
    unchecked: bool = False
    """Let in while Redis failed (``limits.on_redis_failure: admit``): its settle waits on it no more."""


Overrides = Callable[[], Awaitable[LimitsSettings]]
"""hatchway.yaml's limits with those of ``hatchway limits set`` laid over them, read from the store."""
Seed = Callable[[AppliedLimit, Any, Sequence[str]], Awaitable[float]]
"""What a budget's scope spent since a time, read from the request log without the records named."""
Price = Callable[[str, int, int], float | None]
"""What a model call costs in USD (the model a request names, input and output tokens); None: unpriced."""


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
        records_within: float = 11.25,
        on_failure: Callable[[str, str], None] | None = None,
        price: Price | None = None,
    ) -> None:
        """``redis``: a ``redis.asyncio`` client shared by replicas (without it, counts are in process);
        ``lease_seconds``: how long a concurrency slot of a replica that died stays taken;
        ``overrides``: reads the limits to apply now (every ``settings.refresh_seconds``);
        ``spent_since``: where a budget's count starts (without it, at zero);
        ``records_within``: how long a settled run's record may take to reach the run log;
        ``on_failure``: told of each Redis failure (the step, the outcome), for a metric;
        ``price``: prices a run's estimate, held in its budgets while it runs (without it, nothing held)."""
        self._redis = redis
        self._price = price
        self._hold_seconds = lease_seconds
        self._overrides = overrides
        self._spent_since = spent_since
        timeout = settings.redis_timeout_seconds
        if redis is not None:
            self._counters: RedisCounters | MemoryCounters = RedisCounters(
                redis, f"{prefix}limits:", lease_seconds, timeout
            )
            self._spend: RedisSpend | MemorySpend = RedisSpend(
                redis, f"{prefix}limits:spend:", final_after=records_within, timeout=timeout
            )
        else:
            self._counters = MemoryCounters()
            self._spend = MemorySpend()
        self._failures = Failures(on_failure)
        self._repairs = Repairs(self._counters, self._spend, self._failures)
        self._apply(settings)

    def _apply(self, settings: LimitsSettings) -> None:
        if getattr(self, "settings", None) == settings:
            return
        self.settings = settings
        self.enabled = configured(settings)
        self._width = bucket_ms(settings.window_seconds)
        self._plans: dict[tuple[Any, ...], _Plan] = {}

    def _plan(self, who: Requester) -> _Plan:
        org = who.principal
        key = (org.org_id, org.org_name, org.key_id, org.key_name, who.user, who.agent, who.background)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            applied = applied_limits(self.settings, who)
            plan = self._plans[key] = _Plan.of(applied, self._width) if applied else _NOTHING
        return plan

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        overrides: Overrides | None = None,
        spent_since: Seed | None = None,
        on_failure: Callable[[str, str], None] | None = None,
        price: Price | None = None,
    ) -> Limiter:
        """On the gateway's Redis (``redis_url``, ``redis_prefix``) when it has one."""
        redis = None
        if settings.redis_url:
            import redis.asyncio as aioredis

            # A hung Redis is bounded by these as well as by each call's own timeout (``bounded``).
            timeout = settings.limits.redis_timeout_seconds
            redis = aioredis.Redis.from_url(
                settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        # A lease outlives any run that could hold it: a replica that dies frees its slots then.
        deadline = settings.loop_deadline_seconds
        records = settings.run_records  # a record reaches the log within its linger and retries
        return cls(
            settings.limits,
            redis=redis,
            prefix=settings.redis_prefix,
            lease_seconds=deadline * 2 + 60,
            overrides=overrides,
            spent_since=spent_since,
            records_within=records.linger_seconds + records.retry_seconds + 1,
            on_failure=on_failure,
            price=price,
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
        """``refresh`` every ``limits.refresh_seconds``, off the request path, until cancelled; and
        give back what settles could not while Redis failed."""
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            await self.refresh()
            await self._repairs.run()

    async def admit(
        self,
        who: Requester,
        *,
        reserve_tokens: int = 0,
        estimate: CostEstimate | None = None,
        lease: str | None = None,
    ) -> Admission:
        """Count the request in every limit that applies, or raise ``RateLimited`` naming the first
        (the narrowest) that refuses it; a refused request is counted in none. When Redis fails:
        as ``limits.on_redis_failure`` says (``LimitsUnavailable`` for ``refuse``).

        ``estimate``: what its first model call may cost, priced and held in each of its budgets until
        it settles, so that runs started together see each other's cost (docs/limits.md, "Budgets").

        ``lease``: the id its concurrency slots are held under (a queued background response's id,
        so the worker that runs it can give them back, with its reservation: ``held``)."""
        if not self.enabled:
            return Admission()
        plan = self._plan(who)
        if plan is _NOTHING:
            return Admission()
        costs = plan.costs(reserve_tokens)
        admission = Admission(
            lease=lease or _lease(),
            slots=[s.key for s in plan.slot_counts],  # given back if taken, whatever happens next
            budgets=list(plan.budgets),
            token_windows=plan.token_windows,
        )
        try:
            taken = await self._counters.take(
                admission.lease, plan.slot_counts, plan.window_counts, costs, self._width
            )
        except CountsUnavailable as exc:
            return await self._unchecked(admission, exc)  # counted or not: its reservation is unknown
        headers = _headers(plan, taken)
        if taken.refused is not None:
            raise self._refused(plan, taken, costs, headers)
        admission.headers, admission.bucket, admission.reserved = headers, taken.bucket, reserve_tokens
        try:
            reserve_usd = self._estimated(estimate) if plan.budgets else 0.0
            for limit in plan.budgets:
                await self._check_budget(limit, admission, reserve_usd)
            if lease is not None:
                await self._counters.keep(lease, reserve_tokens, taken.bucket)
        except CountsUnavailable as exc:
            return await self._unchecked(admission, exc)
        except BaseException as exc:
            if isinstance(exc, RateLimited):
                exc.headers = {**headers, **exc.headers}  # OpenAI's, on a 429 too
            await self._give_back_all(admission, plan, costs)
            raise
        self._failures.answered()
        return admission

    async def _unchecked(self, admission: Admission, exc: CountsUnavailable) -> Admission:
        """Redis failed while ``admission`` was counted: let it in as it is, or refuse it (503)."""
        refuse = self.settings.on_redis_failure == "refuse"
        self._failures.failed("admit", "refused" if refuse else "admitted", exc)
        if not refuse:
            admission.unchecked = True
            return admission
        # No other call to Redis now: its slots are given back once it answers (its tokens slide out).
        self._repairs.later(admission.lease, admission.slots, [])
        retry_after = max(1, math.ceil(self.settings.refresh_seconds))
        raise LimitsUnavailable(
            f"The limits cannot be checked: Redis did not answer ({exc}); retry after {retry_after} s.",
            retry_after=retry_after,
        )

    async def _give_back_all(self, admission: Admission, plan: _Plan, costs: list[int]) -> None:
        """A request refused after its slots and windows were taken is counted in none."""
        try:
            await self._release(admission)
            await self._counters.give_back(admission.lease, admission.slots, (), 0, 0, self._width)
            for counted, cost in zip(plan.window_counts, costs, strict=True):
                await self._counters.give_back("", (), (counted.key,), -cost, admission.bucket, self._width)
        except CountsUnavailable as exc:  # the refusal stands; its slots are given back later
            self._failures.failed("settle", "deferred", exc)
            self._repairs.later(admission.lease, admission.slots, [])

    async def held(self, who: Requester, lease: str) -> Admission:
        """What a run admitted elsewhere holds under ``lease`` (a queued background response, run by
        a worker), with the tokens it reserved there (``admit``'s ``keep``): settled by whoever ends
        the run. Nothing kept (Redis lost it, or failed): its reservation is left to slide out."""
        if not self.enabled:
            return Admission()
        plan = self._plan(who)
        try:
            kept = await self._counters.held(lease)
        except CountsUnavailable as exc:
            self._failures.failed("settle", "deferred", exc)
            kept = None
        reserved, bucket = kept if kept is not None else (0, 0)
        return Admission(
            reserved=reserved,
            bucket=bucket,
            token_windows=plan.token_windows,
            slots=[s.key for s in plan.slot_counts],
            budgets=list(plan.budgets),
            # the holds taken when it was admitted, under the same lease (none: nothing to give back)
            held=[(b.subject, window(_BUDGETS[b.kind])) for b in plan.budgets],
            lease=lease,
        )

    async def settle(
        self, admission: Admission, used_tokens: int, cost_usd: float = 0.0, records: Sequence[str] = ()
    ) -> None:
        """The run ended: free its slots, count its cost in its budgets, and reconcile its tokens:
        what it used past its reservation is counted now, what it reserved and did not use is given
        back (in the bucket it was counted in, if that has not slid out yet). ``records``: the ids of
        the run log records its cost is in (its own, its subagents').

        Never raises: when Redis fails (or failed when it was admitted), its slots are given back
        and its budgets read from the run log again once Redis answers (``Repairs``); its tokens are
        left as they were counted."""
        slots, admission.slots = admission.slots, []
        if not admission.lease:
            return
        budgets = admission.budgets if cost_usd > 0 else []
        if not budgets:
            try:
                await self._release(admission)
            except CountsUnavailable as exc:  # its holds expire (``Hold.seconds``)
                self._failures.failed("settle", "deferred", exc)
        if admission.unchecked:  # one wait on a failing Redis per request: the rest is repaired
            self._repairs.later(admission.lease, slots, [_count(limit) for limit in budgets])
            return
        try:
            await self._counters.give_back(
                admission.lease,
                slots,
                admission.token_windows,
                used_tokens - admission.reserved,
                admission.bucket,
                self._width,
            )
        except CountsUnavailable as exc:
            self._failures.failed("settle", "deferred", exc)
            self._repairs.later(admission.lease, slots, [_count(limit) for limit in budgets])
            return
        except Exception:
            logger.exception("could not give back the limits of %s", admission.lease)
        for i, limit in enumerate(budgets):
            try:
                await self._spend.add(
                    limit.subject, cost_usd, window(_BUDGETS[limit.kind]), records, admission.lease
                )
            except CountsUnavailable as exc:
                self._failures.failed("settle", "deferred", exc)
                self._repairs.later(admission.lease, [], [_count(b) for b in budgets[i:]])
                return
            except Exception:
                logger.exception("could not count the spend of %s", admission.lease)

    def _refused(self, plan: _Plan, taken: Taken, costs: list[int], headers: dict[str, str]) -> RateLimited:
        assert taken.refused is not None
        if taken.refused < len(plan.slots):
            limit, why, retry_after = plan.slots[taken.refused], "Too many runs in progress", 1.0
        else:
            index = taken.refused - len(plan.slots)
            limit, retry_after = plan.windows[index], taken.resets[index]
            why = _why(limit, costs[index])
        seconds = max(1, math.ceil(retry_after))
        return _REFUSALS[limit.kind](
            f"{why}: {limit.param} is {limit.amount:g}; retry after {seconds} s.",
            param=limit.param,
            headers={**headers, "retry-after": str(seconds)},
        )

    async def _check_budget(self, limit: AppliedLimit, admission: Admission, reserve_usd: float) -> None:
        """Refuse the run if what the scope spent and its runs in flight hold reaches the budget;
        else hold ``reserve_usd`` for it there."""
        period = window(_BUDGETS[limit.kind])
        hold = Hold(reserve_usd, admission.lease, self._hold_seconds)
        taken = await self._spend.take(
            limit.subject,
            lambda since, excluded: self._seed(limit, since, excluded),
            period,
            budget=limit.amount,
            hold=hold,
        )
        if taken is None:
            if reserve_usd > 0:
                admission.held.append((limit.subject, period))
            return
        spent, held = taken
        left = period.seconds_left(datetime.now(UTC))
        message = (
            f"Budget spent: {limit.param} is {limit.amount:g} USD and {spent:.6f} USD has been spent "
            f"this {_BUDGETS[limit.kind]}"
        )
        if held > 0:  # the runs in flight may cost less than they hold: worth a retry when they end
            message += f" ({held:.6f} USD more is held by runs in progress)"
        if spent < limit.amount:
            retry_after = 1
        else:
            retry_after = max(1, math.ceil(left))
        raise BudgetExceeded(
            f"{message}; it resets at {period.end:%Y-%m-%dT%H:%M:%SZ}.",
            param=limit.param,
            headers={
                "retry-after": str(retry_after),
                BUDGET_RESET_HEADER: f"{period.end:%Y-%m-%dT%H:%M:%SZ}",
            },
        )

    def _estimated(self, estimate: CostEstimate | None) -> float:
        """``estimate`` in USD (0: nothing to hold: no estimate, no price, or the price table failed)."""
        if estimate is None or self._price is None:
            return 0.0
        output = estimate.output_tokens
        if output is None:
            output = self.settings.budget_hold_output_tokens
        try:
            usd = self._price(estimate.model, estimate.input_tokens, output)
        except Exception:  # an estimate never refuses a run by failing
            logger.exception("could not price the estimate of a run for %s", estimate.model)
            return 0.0
        return usd if usd is not None and math.isfinite(usd) and usd > 0 else 0.0

    async def _release(self, admission: Admission) -> None:
        """Give back the holds of a run that costs nothing (or was refused)."""
        held, admission.held = admission.held, []
        for subject, period in held:
            await self._spend.release(subject, period, admission.lease)

    async def _seed(self, limit: AppliedLimit, since: Any, excluded: Sequence[str]) -> float:
        return 0.0 if self._spent_since is None else await self._spent_since(limit, since, excluded)

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


def _count(limit: AppliedLimit) -> tuple[str, Any]:
    """A budget's count now: its subject and its day or month."""
    return limit.subject, window(_BUDGETS[limit.kind])


_LEASES = itertools.count()
_LEASE_PREFIX = uuid.uuid4().hex[:16]


def _lease() -> str:
    """A lease id unique across replicas: this process's random prefix and a count."""
    return f"{_LEASE_PREFIX}{next(_LEASES)}"


def _headers(plan: _Plan, taken: Taken) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers, for the tightest requests and tokens limit."""
    headers: dict[str, str] = {}
    for indexes, suffix in ((plan.requests, "requests"), (plan.tokens, "tokens")):
        if not indexes:
            continue
        tightest = min(indexes, key=lambda i: plan.window_counts[i].limit - taken.counts[i])
        limit = plan.window_counts[tightest].limit
        headers[f"x-ratelimit-limit-{suffix}"] = str(limit)
        headers[f"x-ratelimit-remaining-{suffix}"] = str(max(limit - taken.counts[tightest], 0))
        headers[f"x-ratelimit-reset-{suffix}"] = duration(taken.resets[tightest])
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
