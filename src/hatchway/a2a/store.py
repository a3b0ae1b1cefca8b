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
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, String, func, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.errors import NotFound
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

    async def add(
        self,
        org_id: str,
        agent: str,
        context_id: str,
        end_user: str | None,
        *,
        response_id: str | None = None,
        refusal: dict[str, Any] | None = None,
    ) -> A2ATaskRecord:
        record = A2ATaskRecord(
            id=new_task_id(),
            org_id=org_id,
            agent=agent,
            context_id=context_id,
            end_user=end_user,
            response_id=response_id,
            refusal=refusal,
        )
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
        context_id: str | None,
        offset: int,
        limit: int,
    ) -> tuple[list[A2ATaskRecord], int]:
        """Tasks newest first, and how many there are in all (for ``ListTasks``' ``totalSize``)."""
        where = [A2ATaskRecord.org_id == org_id, A2ATaskRecord.agent == agent, _owned_by(end_user)]
        if context_id:
            where.append(A2ATaskRecord.context_id == context_id)
        async with self.db.session() as s:
            total = (
                await s.execute(select(func.count()).select_from(A2ATaskRecord).where(*where))
            ).scalar_one()
            rows = (
                await s.execute(
                    select(A2ATaskRecord)
                    .where(*where)
                    .order_by(A2ATaskRecord.created_at.desc(), A2ATaskRecord.id.desc())
                    .offset(offset)
                    .limit(limit)
                )
            ).scalars()
            return list(rows), int(total)


def _owned_by(end_user: str | None) -> Any:
    return A2ATaskRecord.end_user.is_(None) if end_user is None else A2ATaskRecord.end_user == end_user
