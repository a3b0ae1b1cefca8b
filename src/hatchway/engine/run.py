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

A request learns its record's id from a ``RecordNote`` it holds open (``api/errors.py``'s
``ErrorMiddleware``): the first scope opened under it — in its task or a task started from it —
names its record there, so whatever the request is answered with, an error included, says which
record is its (``x-hatchway-request-id``). A scope that hands its run off takes its name back.

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
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from opentelemetry.trace import Span

from hatchway.engine.context import RunContext
from hatchway.engine.items import Usage
from hatchway.engine.loop import RunResult
from hatchway.engine.run_log import record_steps
from hatchway.errors import ClientGone, HatchwayError
from hatchway.ids import new_id
from hatchway.limits.limiter import Admission, Limiter
from hatchway.limits.scopes import CostEstimate, Requester
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


class RecordNote:
    """While open (``with RecordNote() as note``), ``note.log_id`` is the record id of the first run
    scope opened in this context, or None (no run began, or it was handed to the job queue)."""

    __slots__ = ("_token", "log_id")

    def __init__(self) -> None:
        self.log_id: str | None = None
        self._token: Token[RecordNote | None] | None = None

    def __enter__(self) -> RecordNote:
        self._token = _OPEN_NOTE.set(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        _OPEN_NOTE.reset(self._token)


_OPEN_NOTE: ContextVar[RecordNote | None] = ContextVar("hatchway_record_note", default=None)


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
        limits: Limiter | None = None,
        record_delay_seconds: float = RECORD_DELAY_SECONDS,
    ) -> None:
        self.telemetry = telemetry
        self.log_writer = log_writer
        self.limits = limits
        """What a run admits itself to (``RunScope.admit``); None: no limits (tests of the scope)."""
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
        started: float | None = None,
    ) -> RunScope:
        """``started``: when the run began (``time.monotonic()``), if before now (its request
        arrived earlier): its latency counts from then."""
        return RunScope(
            self, route, ctx, model=model, response_id=response_id, parent_id=parent_id, started=started
        )

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
        started: float | None = None,
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
        ctx.run.record_id = self.log_id  # for the limits: which records its cost will be in
        self.started = time.monotonic() if started is None else started
        self._note = _OPEN_NOTE.get()
        if self._note is not None and self._note.log_id is None:
            self._note.log_id = self.log_id  # the request's run: its answer names this record
        else:
            self._note = None  # a run within the request's (a subagent child): not its record
        self._span: Span | None = None
        self._begun = False
        self._ending: RunEnding | None = None
        self._handed_off = False
        self._admission: Admission | None = None
        """The run's admission to the limits (``admit``, ``hold``): its hold, until ``settle``."""
        self._holding = False
        self._closed = False
        self._latency_seconds = 0.0
        self._ended_ns: int | None = None

    async def __aenter__(self) -> RunScope:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._handed_off:  # a queued run's hold goes with it: its worker settles it
            await self.settle()
        self.close(exc)

    # -- the run's hold on the limits ------------------------------------------------------------------

    async def admit(
        self,
        who: Requester,
        *,
        reserve_tokens: int = 0,
        estimate: CostEstimate | None = None,
        lease: str | None = None,
    ) -> Admission:
        """Count the run in the limits that apply to ``who`` (or raise their refusal, which the
        scope records as the run's ending); the hold is settled when the scope closes, with what
        the run tree used. ``estimate``: its first call's cost, held in its budgets meanwhile;
        ``lease``: the id its slots are held under when another process will end the run (a
        queued response's own id)."""
        assert self._admission is None, "a run is admitted once"
        if self._scopes.limits is None:
            self._admission = Admission()
        else:
            self._admission = await self._scopes.limits.admit(
                who, reserve_tokens=reserve_tokens, estimate=estimate, lease=lease
            )
        self._holding = True
        return self._admission

    async def hold(self, who: Requester, lease: str) -> None:
        """Take over the hold a run was admitted with elsewhere (a queued response's, by the
        replica that accepted it): settled when this scope closes."""
        if self._scopes.limits is not None:
            self._admission = await self._scopes.limits.held(who, lease)
            self._holding = True

    @property
    def admission(self) -> Admission:
        """The run's admission (its rate-limit headers), settled or not; empty before ``admit``."""
        return self._admission or Admission()

    async def settle(self) -> None:
        """Give the run's hold back now, with what its tree used: before its answer leaves, so the
        client's next request finds its slot (idempotent; the scope's close does it otherwise).
        Never raises (``Limiter.settle``)."""
        if not self._holding:
            return
        self._holding = False
        admission, limits = self._admission, self._scopes.limits
        if admission is None or limits is None or not admission.lease:
            return
        run = self.ctx.run
        await limits.settle(admission, run.tree_usage().total_tokens, run.tree_cost(), run.tree_records())

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

    async def stream_failed(self, exc: HatchwayError) -> None:
        """A streamed answer failed after its first byte (its HTTP status was sent): the run ends as a
        502 with the error, and its hold is given back before the stream's last event leaves."""
        self.end(502, error=exc.message)
        await self.settle()

    def hand_off(self) -> None:
        """The run was handed to the job queue: the worker that runs it writes its record."""
        self._handed_off = True
        if self._note is not None:
            self._note.log_id = None  # this scope writes no record for the answer to name

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
        # A run that ended without a result (its client went away) is recorded with what it used so
        # far: its side calls, and an estimate of a stream it abandoned (``EstimatedUsageStep``).
        usage = result.usage if result is not None else None
        if result is None and ctx.run.usage.total_tokens:
            usage = ctx.run.usage
        elif ctx.run.side_calls:  # a classifier's, a sampling request's: the run's, not the client's usage
            usage = _sum(usage, ctx.run.side_usage)
        run = ctx.run
        steps = record_steps(run.log, run.side_calls_omitted, result.steps if result is not None else ())
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
            steps=steps,
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
