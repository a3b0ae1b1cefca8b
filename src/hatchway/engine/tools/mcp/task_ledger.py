"""MCP tasks held in the database (``mcp_tasks``): what makes a task outlive the replica that saw it.

Two kinds of rows, one table:

- **client** — an upstream server answered one of a run's calls with a task. The row binds the
  upstream task id to the run (its response and the call: server, tool, arguments, and which such
  call of the run it was), so a background response that lost its replica and runs again on another
  one finds the task and polls it instead of calling the tool again (``open_call``), and its lease
  is not failed but queued again while such a task is open (``responses/leases.py``).
- **endpoint** — a client of ``/mcp/<name>`` called a tool as a task. The row is the task that
  client polls: its id is Hatchway's, the upstream's id (when the upstream made a task) stays
  behind it; it belongs to one organisation, key's end user and endpoint, and lives ``ttl_seconds``.

The ``result`` / ``error`` / ``input_requests`` of a row are JSON, bounded by the tool-result size
limit that already bounds what a server may answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import JSON, Index, Integer, String, Text, delete, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

logger = logging.getLogger(__name__)
OPEN = ("working", "input_required")


class McpTaskRow(Base):
    __tablename__ = "mcp_tasks"
    __table_args__ = (
        Index("ix_mcp_tasks_call", "org_id", "call_key"),
        Index("ix_mcp_tasks_response", "response_id"),
        Index("ix_mcp_tasks_open", "org_id", "side", "status"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    side: Mapped[str] = mapped_column(String(16))
    """``client`` (a run's upstream task) or ``endpoint`` (a task served at ``/mcp/<name>``)."""
    org_id: Mapped[str] = mapped_column(String(40))
    end_user: Mapped[str | None] = mapped_column(String(256), default=None)
    endpoint: Mapped[str | None] = mapped_column(String(128), default=None)
    server_id: Mapped[str] = mapped_column(String(128))
    server_ref: Mapped[str] = mapped_column(String(64))
    """A digest of the server's URL or command: a task is polled only on the server that made it."""
    tool: Mapped[str] = mapped_column(String(256))
    call_key: Mapped[str | None] = mapped_column(String(64), default=None)
    response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    upstream_task_id: Mapped[str | None] = mapped_column(String(256), default=None)
    status: Mapped[str] = mapped_column(String(16))
    status_message: Mapped[str | None] = mapped_column(Text, default=None)
    result: Mapped[Any | None] = mapped_column(JSON, default=None)
    error: Mapped[Any | None] = mapped_column(JSON, default=None)
    input_requests: Mapped[Any | None] = mapped_column(JSON, default=None)
    state: Mapped[Any | None] = mapped_column(JSON, default=None)
    """Endpoint rows: what the task is when no upstream runs it (an operation awaiting its decision:
    ``{"kind": "operation", "operation": id, "digest": …}``); None for a relayed upstream task."""
    poll_interval_ms: Mapped[int | None] = mapped_column(Integer, default=None)
    resumes: Mapped[int] = mapped_column(Integer, default=0)
    """Client rows: times the run was queued again after losing its replica while the task was open."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """Which call of which run: the same response calling the same tool with the same arguments for
    the n-th time is the same call when the response runs again."""

    org_id: str
    response_id: str
    server_id: str
    server_ref: str
    tool: str
    arguments: dict[str, Any]
    occurrence: int

    @property
    def key(self) -> str:
        material = [self.response_id, self.server_ref, self.tool, self.arguments, self.occurrence]
        return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


def server_ref(url_or_command: str | None) -> str:
    return hashlib.sha256((url_or_command or "").encode()).hexdigest()[:32]


def new_task_id() -> str:
    return "mtask_" + secrets.token_urlsafe(24)


class TaskLedger:
    """The ``mcp_tasks`` rows: recorded, updated, found again, expired."""

    def __init__(self, db: Database, *, ttl_seconds: float, client_ttl_seconds: float | None = None) -> None:
        self.db = db
        self.ttl = timedelta(seconds=ttl_seconds)
        """An endpoint task's lifetime from its creation (its ``ttlMs``)."""
        self.client_ttl = timedelta(seconds=client_ttl_seconds or ttl_seconds)
        """How long a run's record of an upstream task is kept: past the longest wait a run may make."""

    # -- client side: a run's upstream tasks -----------------------------------------------------

    async def open_call(self, call: CallIdentity) -> McpTaskRow | None:
        """The open task this call started on an earlier run of the same response, if any."""
        async with self.db.session() as s:
            return await s.scalar(
                select(McpTaskRow).where(
                    McpTaskRow.org_id == call.org_id,
                    McpTaskRow.call_key == call.key,
                    McpTaskRow.side == "client",
                    McpTaskRow.status.in_(OPEN),
                    McpTaskRow.server_ref == call.server_ref,
                )
            )

    async def record_call(
        self,
        call: CallIdentity | None,
        *,
        org_id: str,
        server_id: str,
        ref: str,
        tool: str,
        upstream_task_id: str,
        status: str,
        poll_interval_ms: int | None,
        end_user: str | None,
    ) -> str:
        row = McpTaskRow(
            id=new_task_id(),
            side="client",
            org_id=org_id,
            end_user=end_user,
            server_id=server_id,
            server_ref=ref,
            tool=tool,
            call_key=call.key if call is not None else None,
            response_id=call.response_id if call is not None else None,
            upstream_task_id=upstream_task_id,
            status=status if status in OPEN else "working",
            poll_interval_ms=poll_interval_ms,
            expires_at=utcnow() + self.client_ttl,
        )
        async with self.db.session() as s:
            s.add(row)
        return row.id

    async def client_task(self, task_id: str, org_id: str) -> McpTaskRow | None:
        async with self.db.session() as s:
            return await s.scalar(
                select(McpTaskRow).where(
                    McpTaskRow.id == task_id, McpTaskRow.org_id == org_id, McpTaskRow.side == "client"
                )
            )

    async def set_status(self, task_id: str, status: str, message: str | None = None) -> None:
        async with self.db.session() as s:
            await s.execute(
                update(McpTaskRow)
                .where(McpTaskRow.id == task_id)
                .values(status=status, status_message=message, updated_at=utcnow())
            )

    async def open_responses(self, response_ids: list[str]) -> dict[str, int]:
        """Of ``response_ids``, those with an open client task, and how often each was resumed."""
        if not response_ids:
            return {}
        async with self.db.session() as s:
            rows = await s.execute(
                select(McpTaskRow.response_id, func.max(McpTaskRow.resumes))
                .where(
                    McpTaskRow.response_id.in_(response_ids),
                    McpTaskRow.side == "client",
                    McpTaskRow.status.in_(OPEN),
                )
                .group_by(McpTaskRow.response_id)
            )
            return {response_id: int(resumes or 0) for response_id, resumes in rows.all()}

    async def note_resumed(self, response_id: str) -> None:
        async with self.db.session() as s:
            await s.execute(
                update(McpTaskRow)
                .where(McpTaskRow.response_id == response_id, McpTaskRow.status.in_(OPEN))
                .values(resumes=McpTaskRow.resumes + 1, updated_at=utcnow())
            )

    # -- endpoint side: tasks a client of /mcp/<name> polls ----------------------------------------

    async def create_endpoint_task(self, row: McpTaskRow) -> None:
        async with self.db.session() as s:
            s.add(row)

    def endpoint_row(self, **fields: Any) -> McpTaskRow:
        return McpTaskRow(id=new_task_id(), side="endpoint", expires_at=utcnow() + self.ttl, **fields)

    async def endpoint_task(
        self, task_id: str, *, org_id: str, end_user: str | None, endpoint: str
    ) -> McpTaskRow | None:
        """The endpoint task, only for the organisation, end user and endpoint it belongs to."""
        async with self.db.session() as s:
            row = await s.scalar(
                select(McpTaskRow).where(
                    McpTaskRow.id == task_id,
                    McpTaskRow.side == "endpoint",
                    McpTaskRow.org_id == org_id,
                    McpTaskRow.endpoint == endpoint,
                    McpTaskRow.expires_at > utcnow(),
                )
            )
        if row is None or (row.end_user or None) != (end_user or None):
            return None
        return row

    async def settle(self, task_id: str, **values: Any) -> McpTaskRow | None:
        """Write what the task became (status, message, result/error, input requests); a terminal
        row is never changed again. Returns the row as stored."""
        values["updated_at"] = utcnow()
        async with self.db.session() as s:
            await s.execute(
                update(McpTaskRow)
                .where(McpTaskRow.id == task_id, McpTaskRow.status.in_(OPEN))
                .values(**values)
            )
            return await s.get(McpTaskRow, task_id, populate_existing=True)

    async def open_count(self, org_id: str) -> int:
        async with self.db.session() as s:
            return int(
                await s.scalar(
                    select(func.count())
                    .select_from(McpTaskRow)
                    .where(
                        McpTaskRow.org_id == org_id,
                        McpTaskRow.side == "endpoint",
                        McpTaskRow.status.in_(OPEN),
                        McpTaskRow.expires_at > utcnow(),
                    )
                )
                or 0
            )

    async def purge_expired(self) -> int:
        """Delete rows past their TTL (an open client row's run is long over by then)."""
        async with self.db.session() as s:
            done = await s.execute(delete(McpTaskRow).where(McpTaskRow.expires_at < utcnow()))
        return int(done.rowcount or 0)  # type: ignore[attr-defined]


async def keep_purging(ledger: TaskLedger, interval_seconds: float) -> None:
    """Delete the rows past their TTL now, then every ``interval_seconds`` (any replica may: the
    delete is the same on every one)."""
    while True:
        try:
            removed = await ledger.purge_expired()
            if removed:
                logger.info("MCP tasks: deleted %d record(s) past their TTL", removed)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("MCP tasks: purge failed; retrying at the next interval")
        await asyncio.sleep(interval_seconds)
