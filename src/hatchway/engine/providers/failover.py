"""A public model served by several targets, with fallbacks: each call goes to one target (picked
by weight among those whose circuit is closed), is retried there with backoff on a failure that
happened before any output, then moves on to the next target and the fallback models' targets
(docs/providers.md, "Routing").

Retryable: an upstream 429, 5xx (and 529), a timeout, a connection error — before the first byte of
an answer reached the caller. A stream that failed after its first event is never retried (what the
client saw cannot be taken back). Each target has a circuit breaker: ``breaker_failures``
consecutive failures open it, it is skipped for ``breaker_open_seconds``, then one call probes it
(half-open) and closes it on success. Breakers are this process's (each replica learns alone).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace

from hatchway.config.settings import FailoverSettings
from hatchway.engine.items import Usage
from hatchway.engine.providers.base import ModelProvider, ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.errors import ProviderError, ProviderStatusError, ProviderTimeout, ProviderUnavailable


@dataclass(eq=False)
class Breaker:
    """One target's circuit: closed, open (skipped) until ``reopen_at``, then half-open (one probe)."""

    failures_to_open: int
    open_seconds: float
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False

    def allows(self, now: float) -> bool:
        """Whether a call may go to the target now (closed, or open long enough to be probed)."""
        return self.failures < self.failures_to_open or (now >= self.open_until and not self.probing)

    def claim(self, now: float) -> bool:
        """Take the right to call the target: always when closed; when half-open, once (the probe)."""
        if self.failures < self.failures_to_open:
            return True
        if not self.allows(now):
            return False
        self.probing = True
        return True

    def released(self) -> None:
        """The call ended with no verdict on the target (cancelled): another may probe it."""
        self.probing = False

    def succeeded(self) -> None:
        self.failures, self.probing = 0, False

    def failed(self, now: float) -> None:
        self.failures += 1
        self.probing = False
        if self.failures >= self.failures_to_open:
            self.open_until = now + self.open_seconds


@dataclass(frozen=True, eq=False)
class Target:
    provider: ModelProvider
    upstream_model: str
    weight: float
    breaker: Breaker

    @property
    def name(self) -> str:
        return f"{self.provider.id}/{self.upstream_model}"


def retryable(exc: BaseException) -> bool:
    """A failure another attempt (here or at another target) may not have."""
    if isinstance(exc, ProviderStatusError):
        return exc.upstream_status == 429 or exc.upstream_status >= 500
    return isinstance(exc, ProviderTimeout | ProviderUnavailable)


@dataclass
class Attempt:
    target: str
    error: str


@dataclass(eq=False)
class FailoverProvider(ModelProvider):
    """The targets of one public model, then those of its fallbacks, as one provider."""

    id: str
    primary: Sequence[Target]
    fallbacks: Sequence[Sequence[Target]]
    settings: FailoverSettings
    rng: random.Random = field(default_factory=random.Random)

    def estimate_cost(self, model: str, usage: Usage) -> float | None:
        """Priced as the first target that would be tried (the one a stream most likely went to)."""
        targets = self.order() or list(self.primary)
        if not targets:
            return None
        return targets[0].provider.estimate_cost(targets[0].upstream_model, usage)

    def order(self) -> list[Target]:
        """The targets to try, in order: the primary ones by weighted draw among the available, then
        each fallback's likewise; a target whose circuit is open is left out."""
        now = time.monotonic()
        out: list[Target] = []
        for group in (self.primary, *self.fallbacks):
            pool = [t for t in group if t.breaker.allows(now)]
            while pool:
                pick = self.rng.choices(pool, weights=[t.weight for t in pool])[0]
                out.append(pick)
                pool.remove(pick)
        return out

    async def request(self, req: ModelRequest) -> ModelResponse:
        attempts: list[Attempt] = []
        last: BaseException | None = None
        for target in self.order():
            if not target.breaker.claim(time.monotonic()):
                continue  # another call is probing it
            for attempt in range(self.settings.retries + 1):
                try:
                    response = await target.provider.request(replace(req, model=target.upstream_model))
                except asyncio.CancelledError:
                    target.breaker.released()
                    raise
                except ProviderError as exc:
                    if not retryable(exc):
                        target.breaker.succeeded()  # the target answered: a 4xx is the request's
                        raise
                    last = exc
                    wait = self._failed(target, exc, attempt, attempts)
                    if wait is None:
                        break
                    await asyncio.sleep(wait)
                    continue
                target.breaker.succeeded()
                return _served(response, target, attempts)
        raise _exhausted(self.id, last, attempts)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        attempts: list[Attempt] = []
        last: BaseException | None = None
        for target in self.order():
            if not target.breaker.claim(time.monotonic()):
                continue
            for attempt in range(self.settings.retries + 1):
                events = target.provider.stream(replace(req, model=target.upstream_model))
                started = False
                try:
                    async for event in events:
                        if isinstance(event, StreamDone):
                            target.breaker.succeeded()
                            yield StreamDone(_served(event.response, target, attempts))
                            return
                        started = True
                        yield event
                    target.breaker.released()  # it ended without a whole response: no verdict
                    return
                except (asyncio.CancelledError, GeneratorExit):
                    target.breaker.released()
                    raise
                except ProviderError as exc:
                    if started or not retryable(exc):
                        if not started:
                            target.breaker.succeeded()
                        else:
                            target.breaker.failed(time.monotonic())
                        raise
                    last = exc
                    wait = self._failed(target, exc, attempt, attempts)
                    if wait is None:
                        break
                    await asyncio.sleep(wait)
                finally:
                    aclose = getattr(events, "aclose", None)
                    if aclose is not None:
                        await aclose()
        raise _exhausted(self.id, last, attempts)

    def _failed(
        self, target: Target, exc: ProviderError, attempt: int, attempts: list[Attempt]
    ) -> float | None:
        """Count a retryable failure of ``target``: seconds before the next attempt on it, or None
        to go to the next target now (its retries are spent, or its ``retry-after`` is too long)."""
        target.breaker.failed(time.monotonic())
        attempts.append(Attempt(target.name, _describe(exc)))
        return None if attempt == self.settings.retries else self._wait(exc, attempt)

    def _wait(self, exc: BaseException, attempt: int) -> float | None:
        """Seconds before the next attempt on the same target; None: go to the next target now."""
        asked = exc.retry_after if isinstance(exc, ProviderStatusError) else None
        if asked is not None:
            return asked if asked <= self.settings.max_retry_after_seconds else None
        cap = min(self.settings.max_backoff_seconds, self.settings.backoff_seconds * 2**attempt)
        return self.rng.uniform(0, cap)  # full jitter

    async def aclose(self) -> None:
        return None  # the targets' providers are the router's, closed by it


def _describe(exc: ProviderError) -> str:
    status = f" {exc.upstream_status}" if isinstance(exc, ProviderStatusError) else ""
    return f"{type(exc).__name__}{status}: {exc.message}"[:300]


def _served(response: ModelResponse, target: Target, attempts: list[Attempt]) -> ModelResponse:
    response.served_by = target.name
    response.failed_attempts = [{"target": a.target, "error": a.error} for a in attempts]
    return response


def _exhausted(model: str, last: BaseException | None, attempts: list[Attempt]) -> BaseException:
    if last is None:
        return ProviderUnavailable(
            f"Every target of the model '{model}' is unavailable (their circuits are open); "
            "try again shortly."
        )
    if isinstance(last, ProviderError):
        last.message = (
            f"{last.message} (after {len(attempts)} attempts: {', '.join(a.target for a in attempts)})"
        )
    return last
