"""Request logs (the run log): written in batches off the request's path; what becomes of a batch the
database does not take is ``log_sink.py``'s business."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from hatchway.errors import NotFound
from hatchway.store.columns import fit_row
from hatchway.store.db import Database
from hatchway.store.log_sink import PROBE_SECONDS, LogSink, RecordTally
from hatchway.store.spool import RecordSpool
from hatchway.store.tables import RequestLog, utcnow

logger = logging.getLogger(__name__)

LOG_STATUSES = ("ok", "error")
"""``status`` of a record: ``ok`` when the request succeeded (HTTP < 400 and no error), else ``error``."""


@dataclass(slots=True)
class LogQuery:
    has_tool_calls: bool | None = None
    model: str | None = None
    status: str | None = None
    on_behalf_of: str | None = None
    route: str | None = None
    """Exact: ``chat.completions``, ``responses``, ``mcp:<endpoint>``…"""
    since: datetime | None = None
    until: datetime | None = None
    after: str | None = None
    """Cursor: return records older than this id (ids are time-ordered)."""
    limit: int = 50


@dataclass(slots=True)
class LogRecord:
    """One request-log row as the request path builds it: a plain object (cheaper than an ORM instance),
    written by ``LogWriter`` with a bulk insert. Attribute names are the ``request_logs`` columns."""

    id: str
    org_id: str
    route: str
    status: str
    http_status: int
    latency_ms: float
    key_id: str | None = None
    key_name: str | None = None
    on_behalf_of: str | None = None
    model: str | None = None
    agent: str | None = None
    plugin_source: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = 0.0
    """What the run's model calls cost in USD; None when one's price is unknown."""
    rounds: int = 0
    max_rounds_hit: bool = False
    has_tool_calls: bool = False
    steps: list[Any] = field(default_factory=list)
    error: str | None = None
    response_id: str | None = None
    parent_id: str | None = None
    created_at: datetime = field(default_factory=utcnow)


Record = LogRecord | RequestLog


class LogWriter:
    """Queues records and inserts them in batches; ``flush()`` waits until all queued ones are stored
    (or, through a database outage, spooled).

    A record waits up to ``linger_seconds`` for company, so a quiet gateway writes several records
    per transaction instead of one: a transaction costs about as much CPU as the request it logs,
    much of it thread hand-offs to the SQLite driver (measured at concurrency 1: 2.4 ms of CPU per
    request with 50 ms, 1.8 ms with 250 ms). ``flush()`` (read-your-writes reads) and ``close()``
    cut the wait short, so no reader and no shutdown waits it out; so does a full batch, so a busy
    gateway holds about one batch in memory, not a linger's worth of records (~740 at 2,900 req/s).

    What it holds is what a SIGKILL loses (SIGTERM closes it: nothing is lost): measured at 200
    req/s with the default linger, 29 records on average, 48 at most (SQLite; ``bench.run_record_loss``,
    docs/reliability.md). Batches go to ``sink`` (``log_sink.py``): bad values, outages, the spool.
    """

    def __init__(
        self,
        db: Database,
        *,
        batch_size: int = 200,
        linger_seconds: float = 0.25,
        retry_seconds: float = 10.0,
        spool: RecordSpool | None = None,
        tally: RecordTally | None = None,
    ) -> None:
        """``retry_seconds``, ``spool`` and ``tally`` go to the ``LogSink`` that stores the batches."""
        self.db = db
        self.batch_size = batch_size
        self.linger_seconds = linger_seconds
        self.sink = LogSink(db, retry_seconds=retry_seconds, spool=spool, tally=tally)
        self._queue: asyncio.Queue[Record] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._held: list[Record] = []
        """Records taken off the queue and not yet handed to ``_write`` (while the writer lingers)."""
        self._pending = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._hurry = asyncio.Event()
        """Set while someone waits in ``flush()``: the writer stops lingering."""
        self._wake = asyncio.Event()
        """Ends a linger early: set by ``flush()`` and when a full batch is waiting."""
        self.observers: list[Callable[[Record], None]] = []
        """Called with each record as it is submitted (metrics); they must be quick and not raise."""
        self.before_flush: list[Callable[[], None]] = []
        """Called first by ``flush()`` and ``close()``: what submits records a little later than it
        could (``RunScopes``' closed runs) submits them now."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="hatchway-log-writer")

    def submit(self, record: Record) -> None:
        """Queue one record; returns at once."""
        for observe in self.observers:
            try:
                observe(record)
            except Exception:  # an observer's bug must never lose the record
                logger.exception("request log observer failed")
        self._pending += 1
        self._drained.clear()
        self._queue.put_nowait(record)
        if len(self._held) + self._queue.qsize() >= self.batch_size:
            self._wake.set()  # a full batch has nothing to wait for

    async def flush(self) -> None:
        """Wait until every record submitted so far is in the database (or in the spool)."""
        self._submit_late()
        if self._task is None:
            await self._write(self._take())
        elif self._pending:
            self._hurry.set()
            self._wake.set()
            await self._drained.wait()

    async def close(self) -> None:
        """Write what is queued, then stop (through an outage: into the spool, without waiting it out)."""
        self._submit_late()
        self.sink.hurry()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        held, self._held = self._held, []
        await self._write(held)  # cancelled while lingering: the records it held are written here
        self._submit_late()  # runs that closed while the above was written
        while not self._queue.empty():
            await self._write(self._take())
        await self.sink.close()

    def _submit_late(self) -> None:
        for submit_now in self.before_flush:
            submit_now()

    def _take(self) -> list[Record]:
        batch = []
        while not self._queue.empty() and len(batch) < self.batch_size:
            batch.append(self._queue.get_nowait())
        return batch

    async def _drain(self) -> None:
        await self.sink.recover()  # what an earlier process spooled and did not replay
        while True:
            self._held = [await self._next()]
            if self._queue.qsize() < self.batch_size - 1:
                await self._linger()
            self._held.extend(self._take())
            batch, self._held = self._held, []
            write = asyncio.ensure_future(self._write(batch))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                await write  # finish the batch in flight; close() writes the rest
                raise

    async def _next(self) -> Record:
        """The next record; while the sink spools, it is given a chance to replay every so often."""
        while self.sink.spooling:
            try:
                async with asyncio.timeout(PROBE_SECONDS):
                    return await self._queue.get()
            except TimeoutError:
                await self.sink.recover()
        return await self._queue.get()

    async def _linger(self) -> None:
        self._wake.clear()
        if self.linger_seconds <= 0 or self._hurry.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.linger_seconds):
                await self._wake.wait()

    async def _write(self, batch: list[Record]) -> None:
        if not batch:
            return
        try:
            await self.sink.write([fit_row(RequestLog.__table__, record) for record in batch])
        except Exception as exc:  # a bug: the writer must go on writing the next batches
            logger.error("%d run record(s) dropped: %s", len(batch), type(exc).__name__)
            self.sink.tally.records_dropped("error", len(batch))
        finally:
            self._pending -= len(batch)
            if self._pending <= 0:
                self._pending = 0
                self._hurry.clear()
                self._drained.set()


class RequestLogStore:
    """Org-scoped reads of the request log."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def list(self, org_id: str, query: LogQuery) -> list[RequestLog]:
        stmt = select(RequestLog).where(RequestLog.org_id == org_id)
        if query.has_tool_calls is not None:
            stmt = stmt.where(RequestLog.has_tool_calls.is_(query.has_tool_calls))
        if query.model:
            stmt = stmt.where(RequestLog.model == query.model)
        if query.status:
            stmt = stmt.where(RequestLog.status == query.status)
        if query.on_behalf_of:
            stmt = stmt.where(RequestLog.on_behalf_of == query.on_behalf_of)
        if query.route:
            stmt = stmt.where(RequestLog.route == query.route)
        if query.since:
            stmt = stmt.where(RequestLog.created_at >= query.since)
        if query.until:
            stmt = stmt.where(RequestLog.created_at < query.until)
        if query.after:
            stmt = stmt.where(RequestLog.id < query.after)
        stmt = stmt.order_by(RequestLog.id.desc()).limit(query.limit)
        async with self.db.session() as s:
            return list(await s.scalars(stmt))

    async def get(self, org_id: str, log_id: str) -> RequestLog:
        async with self.db.session() as s:
            row = await s.scalar(
                select(RequestLog).where(RequestLog.org_id == org_id, RequestLog.id == log_id)
            )
        if row is None:
            raise NotFound(f"No request log '{log_id}'.", param="id")
        return row


def log_to_dict(row: RequestLog) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "request_log",
        "created_at": int(row.created_at.timestamp()),
        "org_id": row.org_id,
        "key_name": row.key_name,
        "on_behalf_of": row.on_behalf_of,
        "route": row.route,
        "model": row.model,
        "agent": row.agent,
        "plugin_source": row.plugin_source,
        "status": row.status,
        "http_status": row.http_status,
        "finish_reason": row.finish_reason,
        "latency_ms": row.latency_ms,
        "usage": {
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "total_tokens": row.total_tokens,
        },
        "cost_usd": row.cost_usd,
        "rounds": row.rounds,
        "max_rounds_hit": row.max_rounds_hit,
        "has_tool_calls": row.has_tool_calls,
        "steps": row.steps,
        "error": row.error,
        "response_id": row.response_id,
        "parent_id": row.parent_id,
        "links": run_links(row.steps or []),
    }


def run_links(steps: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Operations the run's tool calls touched and the subagent responses they spawned, in order."""
    operations: list[str] = []
    children: list[str] = []
    for step in steps:
        if (op := step.get("operation_id")) and op not in operations:
            operations.append(op)
        if (child := step.get("child_response_id")) and child not in children:
            children.append(child)
    return {"operations": operations, "children": children}
