"""Stored responses, their ordered items and the stored requests of queued ones.

Every replica reads and writes responses only through this store, so a chain started on one
replica continues on another. A running response belongs to the replica named in ``owner`` for as
long as its ``lease_expires_at`` lies in the future; the owner renews its leases periodically
(``renew_leases``), and any replica fails responses whose lease has expired (``fail_expired``) —
that is how a run cut short by a crash or a restart ends as ``failed`` instead of ``in_progress``.
A response waiting on the job queue (Redis) has no owner and no lease until a worker ``start``s it.
Terminal writes are conditional (``WHERE status IN ('queued', 'in_progress')``), so a cancel that
lands first always wins over a run finishing later on any replica.

A queued background response also has its request stored (``ResponseJobRecord``): the queue carries
ids only. Its input items and chain are the response's own rows; the job row adds the parameters
that are not echoed on the Response object, who asked (key id and name, never the key), and the
request headers the run reads (an inline plugin, forwarded headers), sealed with the organisation's
vault key because forwarded headers may carry end-user credentials. It goes away with its response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.errors import NotFound
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

ACTIVE = ("queued", "in_progress")
TERMINAL = ("completed", "failed", "cancelled", "incomplete")


class ResponseRecord(Base):
    """One response: its request, its outcome and its place in a chain or a delegation tree."""

    __tablename__ = "responses"
    __table_args__ = (
        Index("ix_responses_status_lease", "status", "lease_expires_at"),
        Index("ix_responses_parent", "parent_response_id"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40), index=True)
    status: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(256))
    request: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """The echoed request parameters (instructions, tools, tool_choice, metadata, limits…)."""
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    incomplete_details: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    previous_response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    parent_response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    call_id: Mapped[str | None] = mapped_column(String(128), default=None)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    background: Mapped[bool] = mapped_column(Boolean, default=False)
    on_behalf_of: Mapped[str | None] = mapped_column(String(256), default=None)
    owner: Mapped[str | None] = mapped_column(String(64), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ResponseItemRecord(Base):
    """One item of a response's input or output, in order; ``data`` is the canonical item."""

    __tablename__ = "response_items"
    __table_args__ = (
        Index("ix_response_items_response", "response_id", "direction", "position"),
        Index("ix_response_items_item", "item_id"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    response_id: Mapped[str] = mapped_column(ForeignKey("responses.id", ondelete="CASCADE"))
    direction: Mapped[str] = mapped_column(String(8))
    position: Mapped[int] = mapped_column(Integer)
    item_id: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


class ResponseJobRecord(Base):
    """The stored request of one queued background response."""

    __tablename__ = "response_jobs"

    response_id: Mapped[str] = mapped_column(ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The create request's parameters without ``input`` (stored as the response's input items)."""
    key_id: Mapped[str | None] = mapped_column(String(40), default=None)
    key_name: Mapped[str | None] = mapped_column(String(128), default=None)
    sealed_headers: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True)
class ResponseJob:
    """A queued response's request, as a worker reads it."""

    response_id: str
    body: dict[str, Any]
    key_id: str | None
    key_name: str | None
    sealed_headers: bytes | None


@dataclass(slots=True)
class ResponseEnding:
    """How a run ended, as stored."""

    status: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None


def stored_error(
    code: str, message: str, hatchway_code: str, error_type: str = "server_error"
) -> dict[str, Any]:
    """A Response's ``error`` in OpenAI's shape (``code`` from its list, ``message``), with the
    error's ``type`` and the gateway's own code (``hatchway_code``, docs/errors.md) beside them."""
    return {
        "code": code,
        "message": message,
        "type": error_type,
        "param": None,
        "hatchway_code": hatchway_code,
    }


class ResponseStore:
    """Org-scoped access to stored responses; ``owner`` names this process for leases."""

    def __init__(self, db: Database, *, owner: str, lease_seconds: float = 30.0) -> None:
        self.db = db
        self.owner = owner
        self.lease_seconds = lease_seconds

    def _lease(self) -> datetime:
        return utcnow() + timedelta(seconds=self.lease_seconds)

    async def create(
        self,
        record: ResponseRecord,
        input_items: list[dict[str, Any]],
        *,
        job: ResponseJobRecord | None = None,
        running: bool = False,
        stored_with: Sequence[object] = (),
    ) -> None:
        """Insert a new response with its input items, owned by this process — or, with ``job`` (its
        stored request), by nobody: a queued job has no lease until a worker starts it.

        ``running``: this process runs it from now on, so it is stored ``in_progress`` (a background
        response then needs no ``start``: one write fewer), while the record keeps saying what it
        said (``queued``) to its caller until the run begins. ``stored_with``: rows written in the
        same transaction (the A2A task a message starts: one write, not a second one racing the
        run's on SQLite's single writer)."""
        record.owner = None if job is not None else self.owner
        record.lease_expires_at = None if job is not None else self._lease()
        told = record.status
        if running and job is None:
            record.status = "in_progress"
        try:
            async with self.db.session() as s:
                s.add(record)
                await s.flush()
                s.add_all(_item_rows(record.id, "input", input_items))
                s.add_all(stored_with)
                if job is not None:
                    s.add(job)
        finally:
            record.status = told

    async def get(self, org_id: str, response_id: str) -> ResponseRecord:
        async with self.db.session() as s:
            return await _one(s, org_id, response_id)

    async def with_items(
        self, org_id: str, response_id: str
    ) -> tuple[ResponseRecord, list[dict[str, Any]], list[dict[str, Any]]]:
        """A response with its input and output items, read in one transaction (an A2A Task is
        built from all three on every read)."""
        async with self.db.session() as s:
            row = await _one(s, org_id, response_id)
            items = await s.scalars(
                select(ResponseItemRecord)
                .where(ResponseItemRecord.response_id == response_id)
                .order_by(ResponseItemRecord.direction, ResponseItemRecord.position)
            )
            split: dict[str, list[dict[str, Any]]] = {"input": [], "output": []}
            for item in items:
                split.setdefault(item.direction, []).append(item.data)
        return row, split["input"], split["output"]

    async def items(self, response_id: str, direction: str | None = None) -> list[dict[str, Any]]:
        """The stored items of one response (input then output), in order."""
        return (await self._items_of([response_id], direction)).get(response_id, [])

    async def outputs(self, response_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        return await self._items_of(response_ids, "output")

    async def _items_of(self, ids: list[str], direction: str | None) -> dict[str, list[dict[str, Any]]]:
        if not ids:
            return {}
        stmt = select(ResponseItemRecord).where(ResponseItemRecord.response_id.in_(ids))
        if direction is not None:
            stmt = stmt.where(ResponseItemRecord.direction == direction)
        stmt = stmt.order_by(
            ResponseItemRecord.response_id,
            ResponseItemRecord.direction,  # "input" sorts before "output"
            ResponseItemRecord.position,
        )
        out: dict[str, list[dict[str, Any]]] = {}
        async with self.db.session() as s:
            for row in await s.scalars(stmt):
                out.setdefault(row.response_id, []).append(row.data)
        return out

    async def items_by_id(self, org_id: str, item_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The organisation's stored items with these ids: id → the records it stands for (a hosted
        call, ``mcp_…``, is its call and its output). Ids not found are absent."""
        if not item_ids:
            return {}
        stmt = (
            select(ResponseItemRecord)
            .join(ResponseRecord, ResponseRecord.id == ResponseItemRecord.response_id)
            .where(ResponseRecord.org_id == org_id, ResponseItemRecord.item_id.in_(set(item_ids)))
            .order_by(ResponseItemRecord.seq)
        )
        found: dict[str, dict[str, Any]] = {}
        homes: dict[str, str] = {}
        async with self.db.session() as s:
            for row in await s.scalars(stmt):
                if row.item_id not in found:
                    found[row.item_id] = row.data
                    homes[row.item_id] = row.response_id
        hosted = [i for i, data in found.items() if data["type"] == "function_call" and data.get("hosted")]
        siblings = await self._items_of(sorted({homes[i] for i in hosted}), None)
        out: dict[str, list[dict[str, Any]]] = {}
        for item_id, data in found.items():
            records = [data]
            if item_id in hosted:
                records += [
                    r
                    for r in siblings.get(homes[item_id], [])
                    if r["type"] == "function_call_output"
                    and r.get("hosted")
                    and r["call_id"] == data["call_id"]
                ][:1]
            out[item_id] = records
        return out

    async def chain(self, org_id: str, response_id: str) -> list[ResponseRecord]:
        """``response_id`` and every response before it, oldest first; NotFound if any is missing."""
        records: list[ResponseRecord] = []
        next_id: str | None = response_id
        seen: set[str] = set()
        while next_id is not None and next_id not in seen:
            seen.add(next_id)
            record = await self.get(org_id, next_id)
            records.append(record)
            next_id = record.previous_response_id
        return list(reversed(records))

    async def conversation(self, chain: list[ResponseRecord]) -> list[dict[str, Any]]:
        """Every input and output item of a chain, in conversation order."""
        by_id = await self._items_of([r.id for r in chain], None)
        items: list[dict[str, Any]] = []
        for record in chain:
            items.extend(by_id.get(record.id, []))
        return items

    async def note_request(self, response_id: str, values: dict[str, Any]) -> None:
        """Add ``values`` to a response's stored request (a remote child's task id, as soon as it
        is known)."""
        async with self.db.session() as s:
            record = await s.get(ResponseRecord, response_id)
            if record is not None:
                record.request = {**(record.request or {}), **values}

    async def start(self, response_id: str) -> bool:
        """``queued`` → ``in_progress``, owned by this process; False when it is no longer queued
        (cancelled, or taken by another worker)."""
        async with self.db.session() as s:
            result = await s.execute(
                update(ResponseRecord)
                .where(ResponseRecord.id == response_id, ResponseRecord.status == "queued")
                .values(
                    status="in_progress",
                    owner=self.owner,
                    updated_at=utcnow(),
                    lease_expires_at=self._lease(),
                )
            )
        return result.rowcount == 1  # type: ignore[attr-defined]

    async def finish(self, response_id: str, ending: ResponseEnding) -> bool:
        """Store the ending unless the response already ended (e.g. was cancelled); True if stored."""
        now = utcnow()
        async with self.db.session() as s:
            result = await s.execute(
                update(ResponseRecord)
                .where(ResponseRecord.id == response_id, ResponseRecord.status.in_(ACTIVE))
                .values(
                    status=ending.status,
                    usage=ending.usage,
                    error=ending.error,
                    incomplete_details=ending.incomplete_details,
                    completed_at=now if ending.status == "completed" else None,
                    updated_at=now,
                    lease_expires_at=None,
                )
            )
            stored = result.rowcount == 1  # type: ignore[attr-defined]
            if stored:
                s.add_all(_item_rows(response_id, "output", ending.output))
        return stored

    async def cancel(self, response_id: str) -> bool:
        """Mark an active response ``cancelled``; False when it had already ended."""
        async with self.db.session() as s:
            result = await s.execute(
                update(ResponseRecord)
                .where(ResponseRecord.id == response_id, ResponseRecord.status.in_(ACTIVE))
                .values(status="cancelled", updated_at=utcnow(), lease_expires_at=None)
            )
        return result.rowcount == 1  # type: ignore[attr-defined]

    async def delete(self, org_id: str, response_id: str) -> None:
        await self.get(org_id, response_id)
        async with self.db.session() as s:
            await s.execute(delete(ResponseItemRecord).where(ResponseItemRecord.response_id == response_id))
            await s.execute(delete(ResponseRecord).where(ResponseRecord.id == response_id))

    async def children(self, org_id: str, parent_id: str) -> list[ResponseRecord]:
        async with self.db.session() as s:
            rows = await s.scalars(
                select(ResponseRecord)
                .where(ResponseRecord.org_id == org_id, ResponseRecord.parent_response_id == parent_id)
                .order_by(ResponseRecord.created_at, ResponseRecord.id)
            )
            return list(rows)

    async def job(self, response_id: str) -> ResponseJob:
        """The stored request of a queued response (written with the response itself)."""
        async with self.db.session() as s:
            row = await s.get(ResponseJobRecord, response_id)
        if row is None:
            raise NotFound(f"No stored request for the queued response '{response_id}'.")
        return ResponseJob(row.response_id, row.body, row.key_id, row.key_name, row.sealed_headers)

    async def top_level(self, org_id: str, after: str | None, limit: int) -> list[ResponseRecord]:
        """The organisation's responses that no parent spawned, newest first, before ``after``."""
        stmt = select(ResponseRecord).where(
            ResponseRecord.org_id == org_id, ResponseRecord.parent_response_id.is_(None)
        )
        if after is not None:
            stmt = stmt.where(ResponseRecord.id < after)
        async with self.db.session() as s:
            return list(await s.scalars(stmt.order_by(ResponseRecord.id.desc()).limit(limit)))

    async def children_counts(self, ids: list[str]) -> dict[str, int]:
        """How many children each of these responses spawned."""
        if not ids:
            return {}
        stmt = (
            select(ResponseRecord.parent_response_id, func.count())
            .where(ResponseRecord.parent_response_id.in_(ids))
            .group_by(ResponseRecord.parent_response_id)
        )
        async with self.db.session() as s:
            return {parent: count for parent, count in (await s.execute(stmt)).all() if parent}

    async def stale_queued(self, older_than: float, limit: int) -> list[tuple[str, str]]:
        """``(org_id, id)`` of up to ``limit`` queued responses with a stored request, untouched for
        ``older_than`` seconds, oldest first; each is marked as touched now, so a backlog larger than
        ``limit`` is checked in turns (see ``responses/requeue.py``)."""
        now = utcnow()
        stmt = (
            select(ResponseRecord.org_id, ResponseRecord.id)
            .join(ResponseJobRecord, ResponseJobRecord.response_id == ResponseRecord.id)
            .where(
                ResponseRecord.status == "queued",
                ResponseRecord.updated_at < now - timedelta(seconds=older_than),
            )
            .order_by(ResponseRecord.updated_at)
            .limit(limit)
        )
        async with self.db.session() as s:
            rows = [(org_id, response_id) for org_id, response_id in (await s.execute(stmt)).all()]
            if rows:
                await s.execute(
                    update(ResponseRecord)
                    .where(ResponseRecord.id.in_([r for _, r in rows]), ResponseRecord.status == "queued")
                    .values(updated_at=now)
                )
        return rows

    # -- leases ---------------------------------------------------------------------------------

    async def renew_leases(self, running: list[str]) -> None:
        """Extend the leases of the active responses this process owns and still runs (``running``:
        the ids of its live run tasks). A response it owns whose run is gone without an ending is
        not renewed: its lease runs out and ``fail_expired`` ends it, as if its replica had died."""
        if not running:
            return
        async with self.db.session() as s:
            await s.execute(
                update(ResponseRecord)
                .where(
                    ResponseRecord.owner == self.owner,
                    ResponseRecord.status.in_(ACTIVE),
                    ResponseRecord.id.in_(running),
                )
                .values(lease_expires_at=self._lease())
            )

    async def cancelled_among(self, response_ids: list[str]) -> list[str]:
        """Which of these (running here) were cancelled, possibly through another replica."""
        if not response_ids:
            return []
        async with self.db.session() as s:
            rows = await s.scalars(
                select(ResponseRecord.id).where(
                    ResponseRecord.id.in_(response_ids), ResponseRecord.status == "cancelled"
                )
            )
            return list(rows)

    async def _queue_again(self, now: datetime, resumable: Resumable) -> None:
        async with self.db.session() as s:
            expired = list(
                (
                    await s.scalars(
                        select(ResponseRecord.id).where(
                            ResponseRecord.status == "in_progress",
                            ResponseRecord.background.is_(True),
                            ResponseRecord.lease_expires_at < now,
                        )
                    )
                ).all()
            )
        again = await resumable(expired) if expired else []
        await self.queue_again(again, expired_before=now)

    async def queue_again(self, response_ids: list[str], *, expired_before: datetime | None = None) -> int:
        """``in_progress`` → ``queued`` (their stored request runs anew: ``fail_expired``, or a run
        its replica stopped while it waited on an upstream MCP task); returns how many."""
        if not response_ids:
            return 0
        where = [ResponseRecord.id.in_(response_ids), ResponseRecord.status == "in_progress"]
        if expired_before is not None:
            where.append(ResponseRecord.lease_expires_at < expired_before)
        async with self.db.session() as s:
            result = await s.execute(
                update(ResponseRecord)
                .where(*where)
                # Old enough at once for the stranded-job pass (``requeue.py``) to queue its job again.
                .values(
                    status="queued",
                    owner=None,
                    lease_expires_at=None,
                    updated_at=datetime(2000, 1, 1, tzinfo=UTC),
                )
            )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    async def fail_expired(self, message: str, resumable: Resumable | None = None) -> int:
        """Fail every active response whose owner stopped renewing its lease; returns how many.

        ``resumable`` picks, among expired background responses, those that can run again (they wait
        on an upstream MCP task: ``engine/tools/mcp/task_ledger.py``): they are queued again instead
        (their stored request is run anew, on the queue's next take)."""
        now = utcnow()
        error = stored_error("server_error", message, "interrupted")
        if resumable is not None:
            await self._queue_again(now, resumable)
        async with self.db.session() as s:
            result = await s.execute(
                update(ResponseRecord)
                .where(ResponseRecord.status.in_(ACTIVE), ResponseRecord.lease_expires_at < now)
                .values(status="failed", error=error, updated_at=now, lease_expires_at=None)
            )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]


Resumable = Callable[[list[str]], Awaitable[list[str]]]
"""Of expired background responses' ids, those to queue again rather than fail."""


async def _one(session: AsyncSession, org_id: str, response_id: str) -> ResponseRecord:
    """The organisation's response; NotFound (the same for another organisation's) otherwise."""
    row = await session.scalar(
        select(ResponseRecord).where(ResponseRecord.id == response_id, ResponseRecord.org_id == org_id)
    )
    if row is None:
        raise NotFound(f"No response with id '{response_id}'.", param="response_id")
    return row


def _item_rows(response_id: str, direction: str, items: list[dict[str, Any]]) -> list[ResponseItemRecord]:
    return [
        ResponseItemRecord(
            response_id=response_id,
            direction=direction,
            position=i,
            item_id=item["id"],
            type=item["type"],
            data=item,
        )
        for i, item in enumerate(items)
    ]
