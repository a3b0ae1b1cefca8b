"""A2A tasks: which stored response answers for each task, and the conversation (``contextId``)
it belongs to.

A task is a stored background response (``responses/store.py``); this table only names it: the
task's id, its organisation, agent and end user (whose tasks another end user of the same
organisation does not see), its context, and the response now answering for it. A task refused
before any response existed (a limit, a budget) keeps the refusal instead, so that ``GetTask``
still tells what became of it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Index,
    String,
    and_,
    case,
    exists,
    false,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus
from hatchway.errors import NotFound
from hatchway.responses.store import ResponseRecord
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow


class A2ATaskRecord(Base):
    __tablename__ = "a2a_tasks"
    __table_args__ = (Index("ix_a2a_tasks_context", "org_id", "agent", "context_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    agent: Mapped[str] = mapped_column(String(128))
    context_id: Mapped[str] = mapped_column(String(128))
    end_user: Mapped[str | None] = mapped_column(String(256), default=None)
    response_id: Mapped[str | None] = mapped_column(String(64), default=None)
    refusal: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """``{"state": "rejected"|"failed", "message": …}`` when no response was made for the task;
    ``{"state": "canceled"}`` when it was cancelled while it asked for input."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


def new_task_id() -> str:
    return f"task_{uuid.uuid4().hex}"


def new_context_id() -> str:
    return f"ctx_{uuid.uuid4().hex}"


class A2ATasks:
    def __init__(self, db: Database) -> None:
        self.db = db

    @staticmethod
    def new(
        org_id: str,
        agent: str,
        context_id: str,
        end_user: str | None,
        *,
        response_id: str | None = None,
        refusal: dict[str, Any] | None = None,
    ) -> A2ATaskRecord:
        """A task not stored yet (``add`` stores it; a task of a response is stored with it)."""
        return A2ATaskRecord(
            id=new_task_id(),
            org_id=org_id,
            agent=agent,
            context_id=context_id,
            end_user=end_user,
            response_id=response_id,
            refusal=refusal,
        )

    async def add(
        self,
        org_id: str,
        agent: str,
        context_id: str,
        end_user: str | None,
        *,
        refusal: dict[str, Any] | None = None,
    ) -> A2ATaskRecord:
        record = self.new(org_id, agent, context_id, end_user, refusal=refusal)
        async with self.db.session() as s:
            s.add(record)
        return record

    async def get(self, org_id: str, agent: str, end_user: str | None, task_id: str) -> A2ATaskRecord:
        """The task, if it is this organisation's, agent's and end user's; NotFound otherwise (the
        same answer whether it does not exist or is someone else's)."""
        async with self.db.session() as s:
            record = await s.get(A2ATaskRecord, task_id)
        if record is None or (record.org_id, record.agent, record.end_user) != (org_id, agent, end_user):
            raise NotFound(f"No task with id '{task_id}' found.", param="id", code="task_not_found")
        return record

    async def latest_in_context(
        self, org_id: str, agent: str, end_user: str | None, context_id: str
    ) -> A2ATaskRecord | None:
        async with self.db.session() as s:
            return (
                await s.execute(
                    select(A2ATaskRecord)
                    .where(
                        A2ATaskRecord.org_id == org_id,
                        A2ATaskRecord.agent == agent,
                        A2ATaskRecord.context_id == context_id,
                        A2ATaskRecord.response_id.is_not(None),
                        _owned_by(end_user),
                    )
                    .order_by(A2ATaskRecord.created_at.desc(), A2ATaskRecord.id.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()

    async def set_response(self, task_id: str, response_id: str) -> None:
        async with self.db.session() as s:
            await s.execute(
                update(A2ATaskRecord)
                .where(A2ATaskRecord.id == task_id)
                .values(response_id=response_id, updated_at=utcnow())
            )

    async def cancel_asking(self, task_id: str, message: str) -> None:
        """The task was cancelled while it waited for its end user's answer."""
        async with self.db.session() as s:
            await s.execute(
                update(A2ATaskRecord)
                .where(A2ATaskRecord.id == task_id)
                .values(refusal={"state": "canceled", "message": message}, updated_at=utcnow())
            )

    async def page(
        self,
        org_id: str,
        agent: str,
        end_user: str | None,
        *,
        context_id: str | None = None,
        state: StateFilter | None = None,
        updated_after: datetime | None = None,
        before: Cursor | None = None,
        limit: int,
    ) -> tuple[list[A2ATaskRecord], int, Cursor | None]:
        """Tasks by their status timestamp, most recently updated first (A2A's ``ListTasks``
        order); how many match in all (``totalSize``); and the cursor of the next page, if any.

        ``state``: only tasks in that state (decided from their response, as ``task_of`` does);
        ``updated_after``: only tasks whose status changed at or after it; ``before``: the page
        after the task this cursor names."""
        when = _status_time()
        where = [A2ATaskRecord.org_id == org_id, A2ATaskRecord.agent == agent, _owned_by(end_user)]
        if context_id:
            where.append(A2ATaskRecord.context_id == context_id)
        if state is not None:
            where.append(state.condition())
        if updated_after is not None:
            where.append(when >= updated_after)
        joined = select(A2ATaskRecord, when.label("status_time")).outerjoin(
            ResponseRecord, ResponseRecord.id == A2ATaskRecord.response_id
        )
        paged = where
        if before is not None:
            paged = [
                *where,
                or_(when < before.when, and_(when == before.when, A2ATaskRecord.id < before.task_id)),
            ]
        async with self.db.session() as s:
            total = (
                await s.execute(
                    select(func.count())
                    .select_from(A2ATaskRecord)
                    .outerjoin(ResponseRecord, ResponseRecord.id == A2ATaskRecord.response_id)
                    .where(*where)
                )
            ).scalar_one()
            rows = (
                await s.execute(
                    joined.where(*paged).order_by(when.desc(), A2ATaskRecord.id.desc()).limit(limit + 1)
                )
            ).all()
        records = [row[0] for row in rows[:limit]]
        more = len(rows) > limit
        after = Cursor(rows[limit - 1][1], records[-1].id) if more and records else None
        return records, int(total), after


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a page of ``ListTasks`` ended: the last task's status time and id."""

    when: datetime
    task_id: str


@dataclass(frozen=True, slots=True)
class StateFilter:
    """The tasks that show as one A2A state, in terms of what is stored (``tasks.py`` maps a state
    to this): tasks without a refusal whose response has one of ``statuses`` — and, for a
    ``completed`` response, awaits (``asking=True``) or does not await (``asking=False``) its end
    user's confirmation — or tasks whose refusal has one of ``refusals``."""

    statuses: tuple[str, ...] = ()
    refusals: tuple[str, ...] = ()
    asking: bool | None = None

    def condition(self) -> ColumnElement[bool]:
        refusal = _refusal_state()
        either = []
        if self.statuses:
            ran = and_(refusal.is_(None), ResponseRecord.status.in_(self.statuses))
            if self.asking is not None:
                asks = and_(ResponseRecord.status == "completed", _asks())
                ran = and_(ran, asks if self.asking else ~asks)
            either.append(ran)
        if self.refusals:
            either.append(refusal.in_(self.refusals))
        return or_(*either) if either else false()


def _refusal_state() -> ColumnElement[Any]:
    """The refusal's state, NULL when there is none (stored as SQL NULL or as JSON null)."""
    return A2ATaskRecord.refusal["state"].as_string()


def _status_time() -> ColumnElement[datetime]:
    """When the task's status last changed: a refused or withdrawn task's own time, else its
    response's end (or last change, while it runs); as ``task_of``'s status timestamp."""
    return case(
        (_refusal_state().is_not(None), A2ATaskRecord.updated_at),
        else_=func.coalesce(ResponseRecord.completed_at, ResponseRecord.updated_at, A2ATaskRecord.updated_at),
    )


def _asks() -> ColumnElement[bool]:
    """The task's response left an operation awaiting its end user's confirmation."""
    return exists().where(
        OperationRecord.org_id == A2ATaskRecord.org_id,
        OperationRecord.response_id == A2ATaskRecord.response_id,
        OperationRecord.status == OperationStatus.AWAITING_CONFIRMATION.value,
    )


def _owned_by(end_user: str | None) -> Any:
    return A2ATaskRecord.end_user.is_(None) if end_user is None else A2ATaskRecord.end_user == end_user
