"""A run from planning to its end: ``RunScope`` owns what a run starts and ends it on every exit path.

Every adapter runs a request inside ``async with scopes.open(route, ctx) as scope``. The scope is
the only thing that moves the ``runs_in_flight`` gauge, opens and closes the run's span and writes
its run-log record — exactly once, whichever way the block is left:

- ``scope.end(status, result, error)`` said how the run ended: that is recorded;
- an exception left the block: a ``HatchwayError`` is recorded with its status and message, a
  cancellation (the client went away, the gateway is stopping) as 499, anything else as 500;
- the block ended without either (a stream whose client hung up): 499;
- ``scope.hand_off()``: the run went to the job queue; the worker that runs it records it, and
  this scope ends its span and gauge without a record.

The gauge and span start when the run is planned (``begin``); a request refused before that
(a bad body) still gets its record, with no span.

The gauge moves as the scope closes; the record is built and submitted, and the span ended (at the
time the scope closed), ``RECORD_DELAY_SECONDS`` later, together with the other runs closed by then,
or as soon as someone reads (``LogWriter.flush()``, ``GET /metrics``) or the gateway stops. The scope
closes right after the answer's last byte is written: at concurrency 1 the client's next request is
already there, and building the record (~0.1 ms on a 2-core VM whose caches went cold during the
upstream wait) made it wait; a few milliseconds later the gateway is waiting for that request's
upstream instead (``bench.ab``: −0.09 ms added latency at concurrency 1). Nothing about the run
changes after its scope closes, so the record says the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from opentelemetry.trace import Span

from hatchway.engine.context import RunContext
from hatchway.engine.items import Usage
from hatchway.engine.loop import RunResult
from hatchway.errors import ClientGone, HatchwayError
from hatchway.ids import new_id
from hatchway.observability.telemetry import RunInstruments, Telemetry
from hatchway.store.db import DATABASE_UNAVAILABLE, database_unreachable
from hatchway.store.logs import LogRecord, LogWriter

logger = logging.getLogger(__name__)

CLIENT_GONE = ClientGone.status_code
RECORD_DELAY_SECONDS = 0.005
"""How long after its scope closes a run's record is built and submitted (at the latest)."""
INTERRUPTED = (
    "The run was interrupted before it finished: the gateway shut down or restarted, or the client went away."
)
UNANSWERED = "The client went away before the run finished."


@dataclass(frozen=True, slots=True)
class RunEnding:
    """How a run ended, as its record says."""

    http_status: int
    result: RunResult | None = None
    error: str | None = None


class RunScopes:
    """Opens the run scopes of one gateway (its telemetry and its run-log writer)."""

    def __init__(
        self,
        telemetry: Telemetry,
        log_writer: LogWriter,
        *,
        record_delay_seconds: float = RECORD_DELAY_SECONDS,
    ) -> None:
        self.telemetry = telemetry
        self.log_writer = log_writer
        self.record_delay_seconds = record_delay_seconds
        self._closed: list[RunScope] = []
        """Scopes closed and not yet recorded: those of the last ``record_delay_seconds``."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        """The loop ``_timer`` runs on: a timer left on a loop that ended never fires."""
        log_writer.before_flush.append(self.record_closed)

    def open(
        self,
        route: str,
        ctx: RunContext,
        *,
        model: str | None = None,
        response_id: str | None = None,
        parent_id: str | None = None,
    ) -> RunScope:
        return RunScope(self, route, ctx, model=model, response_id=response_id, parent_id=parent_id)

    def record_closed(self) -> None:
        """Record every run whose scope has closed (its record submitted, its span ended) now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        closed, self._closed = self._closed, []
        for scope in closed:
            try:
                scope._finish()
            except Exception:  # a bug in one record must not lose the others
                logger.exception("run record of %s failed", scope.log_id)

    def _closing(self, scope: RunScope) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # closed outside a loop (a synchronous caller): recorded at once
            scope._finish()
            return
        self._closed.append(scope)
        if self._timer is None or self._timer_loop is not loop:
            self._timer = loop.call_later(self.record_delay_seconds, self.record_closed)
            self._timer_loop = loop


class RunScope:
    """One run's lifecycle: gauge, span and record, started and ended by the same ``async with``."""

    def __init__(
        self,
        scopes: RunScopes,
        route: str,
        ctx: RunContext,
        *,
        model: str | None = None,
        response_id: str | None = None,
        parent_id: str | None = None,
    ) -> None:
        self._scopes = scopes
        self.route = route
        self.ctx = ctx
        self.model = model
        self.response_id = response_id
        self.parent_id = parent_id
        self.agent: str | None = None
        self.plugin_source: str | None = None
        self.log_id = new_id("log")
        """The id of this run's record (``x-hatchway-request-id``), known before it is written."""
        self.started = time.monotonic()
        self._span: Span | None = None
        self._begun = False
        self._ending: RunEnding | None = None
        self._handed_off = False
        self._closed = False
        self._latency_seconds = 0.0
        self._ended_ns: int | None = None

    async def __aenter__(self) -> RunScope:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(exc)

    # -- what the run says about itself ----------------------------------------------------------

    def begin(self, *, name: str, agent: str | None, plugin_source: str | None) -> RunInstruments:
        """The run is planned: it counts in flight and, with tracing on, its span opens. The
        instruments wrap the plan's model and toolsets in spans of their own."""
        if self._begun:
            raise RuntimeError("a run scope begins once")
        self._begun = True
        self.agent = agent
        self.plugin_source = plugin_source
        telemetry = self._scopes.telemetry
        self._span = telemetry.run_started(name, self._span_attributes(name))
        return telemetry.instruments(self._span)

    def end(self, http_status: int, result: RunResult | None = None, error: str | None = None) -> None:
        """How the run ended; recorded when the scope closes (the first word stands)."""
        if self._ending is None:
            self._ending = RunEnding(http_status, result, error)

    def hand_off(self) -> None:
        """The run was handed to the job queue: the worker that runs it writes its record."""
        self._handed_off = True

    @property
    def ended(self) -> bool:
        return self._ending is not None

    # -- the end -----------------------------------------------------------------------------------

    def close(self, exc: BaseException | None = None) -> None:
        """End the run (idempotent): take it out of flight now; record it and close its span
        shortly (``RunScopes.record_closed``)."""
        if self._closed:
            return
        self._closed = True
        self._ending = self._ending or _ending_of(exc)
        self._latency_seconds = time.monotonic() - self.started  # rounded in the record, later
        self._ended_ns = time.time_ns() if self._span is not None else None
        if self._begun:
            self._scopes.telemetry.run_left()
        self._scopes._closing(self)

    def _finish(self) -> None:
        """Record the closed run and end its span (``RunScopes.record_closed``)."""
        assert self._ending is not None, "a run is recorded once its scope has closed"
        record = None if self._handed_off else self._record(self._ending)
        if record is not None:
            self._scopes.log_writer.submit(record)
        if self._begun:
            self._scopes.telemetry.run_ended(self._span, record, end_time=self._ended_ns)

    def _span_attributes(self, name: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.request.model": self.model or "",
            "hatchway.org_id": self.ctx.org_id,
            "hatchway.depth": self.ctx.depth,
            "hatchway.plugin_source": self.plugin_source or "",
        }
        if self.response_id:
            attributes["hatchway.response_id"] = self.response_id
        return attributes

    def _record(self, ending: RunEnding) -> LogRecord:
        ctx, result = self.ctx, ending.result
        usage = result.usage if result is not None else None
        if ctx.run.side_calls:  # a classifier's, a sampling request's: the run's, not the client's usage
            usage = _sum(usage, ctx.run.side_usage)
        listing = [
            {"type": "list_tools", "round": 1, "server": f.server, "outcome": "error", "error": f.message}
            for f in ctx.run.listing_failures
        ]
        listing.extend(
            {"type": "list_tools", "round": 1, "server": server, "outcome": "ok", "dropped_headers": names}
            for server, names in ctx.run.dropped_headers.items()
        )
        listing.extend({"type": "input_round", **entry} for entry in ctx.run.input_rounds)
        listing.extend({"type": "tool_drift", **entry} for entry in ctx.run.tool_drift)
        listing.extend({"type": "tool_description", **entry} for entry in ctx.run.described)
        listing.extend(ctx.run.side_calls)
        if ctx.run.side_calls_omitted:
            listing.append({"type": "side_calls_omitted", "count": ctx.run.side_calls_omitted})
        return LogRecord(
            id=self.log_id,
            org_id=ctx.principal.org_id,
            key_id=ctx.principal.key_id,
            key_name=ctx.principal.key_name,
            on_behalf_of=ctx.on_behalf_of,
            route=self.route,
            model=self.model,
            agent=self.agent,
            plugin_source=self.plugin_source,
            status="ok" if ending.http_status < 400 and ending.error is None else "error",
            http_status=ending.http_status,
            finish_reason=result.finish_reason if result is not None else None,
            latency_ms=round(self._latency_seconds * 1000, 3),
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
            cost_usd=usage.cost if usage else 0.0,
            rounds=result.rounds if result is not None else 0,
            max_rounds_hit=result.max_rounds_hit if result is not None else False,
            has_tool_calls=result.has_tool_calls if result is not None else False,
            steps=[*listing, *(result.steps if result is not None else [])],
            error=ctx.redact(ending.error) if ending.error else None,
            response_id=self.response_id,
            parent_id=self.parent_id,
        )


def _sum(*usages: Usage | None) -> Usage:
    total = Usage()
    for usage in usages:
        if usage is not None:
            total.add(usage)
    return total


def _ending_of(exc: BaseException | None) -> RunEnding:
    """What an exception leaving a run's scope (or none, with no ``end``) means for its record."""
    if exc is None:
        return RunEnding(CLIENT_GONE, error=UNANSWERED)
    if isinstance(exc, HatchwayError):
        return RunEnding(exc.status_code, error=exc.message)
    if isinstance(exc, asyncio.CancelledError):
        return RunEnding(CLIENT_GONE, error=INTERRUPTED)
    if database_unreachable(exc):
        return RunEnding(503, error=DATABASE_UNAVAILABLE.message)
    return RunEnding(500, error=f"Internal error ({type(exc).__name__}).")
