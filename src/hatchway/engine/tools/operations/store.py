"""Operations in the database. Every state change is a compare-and-set in SQL.

``UPDATE operations SET status = … WHERE id = … AND status IN (…)`` and its row count decide who
moved an operation: two confirmations racing on two connections (two replicas, PostgreSQL or
SQLite) both send the UPDATE, exactly one sees a row count of 1 and executes; the other reads the
outcome. Each compare-and-set is the first statement of its own transaction, so SQLite takes its
write lock before reading anything.

An EXECUTING operation holds a lease that its executor renews; when the lease lapses (the process
died) the operation becomes INTERRUPTED — at start, and lazily whenever it is read. At start,
operations whose executor ran on this host and is provably gone (its pid no longer exists, or is
now ours) are interrupted at once, without waiting for the lease. Pending operations past
``expires_at`` become CANCELLED with reason ``expired``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from hatchway.audit import AuditTrail
from hatchway.engine.tools.operations.models import (
    OPEN_STATES,
    OperationQuestion,
    OperationRecord,
    OperationStatus,
)
from hatchway.errors import NotFound
from hatchway.ids import new_id
from hatchway.store.columns import clean_json
from hatchway.store.db import Database
from hatchway.store.tables import utcnow

S = OperationStatus
_SUPERSEDE_ATTEMPTS = 3
_TURN_CANDIDATES = 50
"""Operations looked at to bind one reply (a turn's questions, a conversation's latest)."""
EXPIRED = "expired: no confirmation before expires_at; nothing was executed"
LEASE_LAPSED = "interrupted: the executor stopped before reporting an outcome; not re-run"
OTHER_USER_PENDING = (
    "not asked: operation {} of another end user awaits confirmation in this conversation; nothing was "
    "executed"
)


def _clean(values: dict[str, Any]) -> dict[str, Any]:
    """Values as every backend stores them: PostgreSQL refuses a NUL or a lone surrogate in text, and
    these come from models, users, validators and MCP servers."""
    return {k: clean_json(v) if isinstance(v, str | dict | list) else v for k, v in values.items()}


def _requested_by(end_user: str | None) -> Any:
    return (
        OperationRecord.requested_by.is_(None)
        if end_user is None
        else OperationRecord.requested_by == end_user
    )


def _conversation(org_id: str, agent: str, session_key: str) -> list[Any]:
    """The operations of one conversation (an agent's session in an organisation)."""
    return [
        OperationRecord.org_id == org_id,
        OperationRecord.agent == agent,
        OperationRecord.session_key == session_key,
    ]


def _same_conversation(op: OperationRecord) -> list[Any]:
    return [*_conversation(op.org_id, op.agent, op.session_key), _requested_by(op.requested_by)]


def executor_id() -> str:
    """``host:pid:nonce`` — who executes; lets a restarted process recognise its dead predecessor."""
    return f"{socket.gethostname()[:255]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def executor_is_gone(executor: str | None) -> bool:
    """True only when ``executor`` ran on this host and that process cannot still be running."""
    host, _, rest = (executor or "").partition(":")
    pid_text, _, _ = rest.partition(":")
    if host != socket.gethostname()[:255] or not pid_text.isdigit():
        return False  # another host (a live replica, maybe): only its lease can tell
    pid = int(pid_text)
    if pid == os.getpid():
        return True  # our pid, but not our executor id: a previous process (e.g. a restarted container)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # exists, owned by someone else
    return False


@dataclass(slots=True)
class OperationDraft:
    """A new operation, before anything is validated."""

    org_id: str
    agent: str
    session_key: str | None
    tool: str
    server: str
    operation_type: str
    policy: dict[str, Any]
    arguments: dict[str, Any]
    ttl_seconds: float
    call_id: str | None = None
    response_id: str | None = None
    requested_by: str | None = None


@dataclass(slots=True)
class OperationQuery:
    status: OperationStatus | None = None
    agent: str | None = None
    session_key: str | None = None
    after: str | None = None
    limit: int = 50
    end_user_only: bool = False
    """Only the operations ``end_user`` asked for (an ``app`` key sees only its own end user's)."""
    end_user: str | None = None


class OperationStore:
    """Creates operations and moves them between states, guarded in the database."""

    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float = 30.0,
        clock: Callable[[], datetime] = utcnow,
        instance_id: str | None = None,
        audit: AuditTrail | None = None,
    ) -> None:
        self.db = db
        self.audit = audit
        """Where confirmations and cancellations are recorded (``execution.record_decision``)."""
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.instance_id = instance_id or executor_id()
        """Who executes: an operation's ``executor``; only it may renew the lease or record the outcome."""

    # -- creation --------------------------------------------------------------------------------

    async def create(self, draft: OperationDraft) -> OperationRecord:
        """Insert in COLLECTING_PARAMETERS; a new operation supersedes the conversation's open ones."""
        now = self.clock()
        row = OperationRecord(
            id=new_id("op"),
            org_id=draft.org_id,
            agent=draft.agent,
            session_key=draft.session_key,
            status=S.COLLECTING_PARAMETERS,
            tool=draft.tool,
            server=draft.server,
            operation_type=draft.operation_type,
            policy=clean_json(draft.policy),
            call_id=clean_json(draft.call_id) if draft.call_id is not None else None,
            response_id=draft.response_id,
            arguments=clean_json(draft.arguments),
            requested_by=draft.requested_by,
            created_at=now,
            updated_at=now,
            expires_at=now + timedelta(seconds=draft.ttl_seconds),
        )
        async with self.db.session() as s:
            if draft.session_key is not None:
                await s.execute(self._supersede_stmt(row, OPEN_STATES - {S.AWAITING_APPROVAL}, now))
                # An approval pending for hours is superseded only by a new call of the same tool
                # (the same request, changed): another request of the conversation leaves it alone.
                await s.execute(
                    self._supersede_stmt(row, [S.AWAITING_APPROVAL], now).where(
                        OperationRecord.tool == row.tool
                    )
                )
            s.add(row)
        return row

    # -- transitions -----------------------------------------------------------------------------

    async def transition(
        self, op_id: str, from_states: Iterable[OperationStatus], to: OperationStatus, **values: Any
    ) -> bool:
        """Move ``op_id`` to ``to`` if it is in one of ``from_states``; False if someone else moved it."""
        stmt = (
            update(OperationRecord)
            .where(OperationRecord.id == op_id, OperationRecord.status.in_([s.value for s in from_states]))
            .values(status=to.value, updated_at=self.clock(), **_clean(values))
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def await_confirmation(
        self, op: OperationRecord, *, turn_key: str | None = None, **values: Any
    ) -> bool:
        """Open → AWAITING_CONFIRMATION, superseding its end user's other pending one of the
        conversation; the question is filed under ``turn_key`` in the same transaction (``turns.py``).

        Another end user's question pending in the conversation is left alone: this one is
        CANCELLED instead (one question per conversation), and False returned."""
        values = _clean(values)
        for attempt in range(_SUPERSEDE_ATTEMPTS):
            now = self.clock()
            try:
                async with self.db.session() as s:
                    if op.session_key is not None:
                        await s.execute(self._supersede_stmt(op, [S.AWAITING_CONFIRMATION], now))
                    stmt = (
                        update(OperationRecord)
                        .where(
                            OperationRecord.id == op.id,
                            OperationRecord.status.in_([S.COLLECTING_PARAMETERS, S.PRE_VALIDATION]),
                        )
                        .values(status=S.AWAITING_CONFIRMATION, updated_at=now, **values)
                        .execution_options(synchronize_session=False)
                    )
                    if (await s.execute(stmt)).rowcount != 1:
                        return False
                    if turn_key is not None:
                        s.add(
                            OperationQuestion(
                                turn_key=turn_key, operation_id=op.id, org_id=op.org_id, asked_at=now
                            )
                        )
                    return True
            except IntegrityError:
                # Another question of the conversation is pending (the unique index refused ours):
                # another end user's stays; one of ours that came at the same moment is superseded.
                other = await self.pending_for(op.org_id, op.agent, op.session_key or "")
                if other is not None and other.requested_by != op.requested_by:
                    await self.cancel(op.id, OTHER_USER_PENDING.format(other.id))
                    return False
                if attempt == _SUPERSEDE_ATTEMPTS - 1:
                    raise
        return False

    async def await_approval(self, op: OperationRecord, **values: Any) -> bool:
        """Open → AWAITING_APPROVAL with the approval's snapshot and deadline (``approvals.py``)."""
        return await self.transition(
            op.id, [S.COLLECTING_PARAMETERS, S.PRE_VALIDATION], S.AWAITING_APPROVAL, **values
        )

    async def claim(
        self,
        op_id: str,
        *,
        from_states: Iterable[OperationStatus] = (S.AWAITING_CONFIRMATION,),
        confirmed_by: str | None = None,
        via: str,
        org_id: str | None = None,
        expected_digest: str | None = None,
        expected_version: datetime | None = None,
        **values: Any,
    ) -> bool:
        """Take ``op_id`` to EXECUTING for this process. Exactly one concurrent caller gets True.

        A pending operation past ``expires_at`` cannot be claimed. ``values`` are set with the claim.
        ``expected_digest`` / ``expected_version`` (its ``updated_at``): only if the arguments and the
        row are still those the caller counted approvals against (an escalation changes the version).
        """
        now = self.clock()
        conditions = [
            OperationRecord.id == op_id,
            OperationRecord.status.in_([s.value for s in from_states]),
            OperationRecord.expires_at > now,
        ]
        if org_id is not None:
            conditions.append(OperationRecord.org_id == org_id)
        if expected_digest is not None:
            conditions.append(OperationRecord.arguments_digest == expected_digest)
        if expected_version is not None:
            conditions.append(OperationRecord.updated_at == expected_version)
        stmt = (
            update(OperationRecord)
            .where(*conditions)
            .values(
                status=S.EXECUTING,
                confirmed_by=confirmed_by,
                confirmed_via=via,
                confirmed_at=now,
                started_at=now,
                updated_at=now,
                executor=self.instance_id,
                lease_expires_at=now + timedelta(seconds=self.lease_seconds),
                **_clean(values),
            )
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def renew_lease(self, op_id: str) -> bool:
        """Keep an EXECUTING operation ours while the tool call is in flight."""
        now = self.clock()
        stmt = (
            update(OperationRecord)
            .where(
                OperationRecord.id == op_id,
                OperationRecord.status == S.EXECUTING,
                OperationRecord.executor == self.instance_id,
            )
            .values(lease_expires_at=now + timedelta(seconds=self.lease_seconds))
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def finish(self, op_id: str, to: OperationStatus, **values: Any) -> bool:
        """Record the executor's outcome. It also overwrites INTERRUPTED set after a lapsed lease:
        the executor knows what happened, a sweeper only knows it stopped hearing from it."""
        now = self.clock()
        stmt = (
            update(OperationRecord)
            .where(
                OperationRecord.id == op_id,
                OperationRecord.status.in_([S.EXECUTING, S.INTERRUPTED]),
                OperationRecord.executor == self.instance_id,
            )
            .values(status=to, updated_at=now, completed_at=now, lease_expires_at=None, **_clean(values))
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def cancel(self, op_id: str, reason: str, *, org_id: str | None = None) -> bool:
        """Open → CANCELLED; False if it was already executing or finished."""
        now = self.clock()
        conditions = [OperationRecord.id == op_id, OperationRecord.status.in_(list(OPEN_STATES))]
        if org_id is not None:
            conditions.append(OperationRecord.org_id == org_id)
        stmt = (
            update(OperationRecord)
            .where(*conditions)
            .values(status=S.CANCELLED, status_reason=clean_json(reason), updated_at=now, completed_at=now)
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    # -- recovery --------------------------------------------------------------------------------

    async def recover(self, *, org_id: str | None = None, at_start: bool = False) -> tuple[int, int]:
        """Lapsed leases → INTERRUPTED; pending past expiry → CANCELLED. Returns both counts.

        Called at start (``at_start``: also the executions of this host's dead processes) and before
        reads, so a replica sees a dead peer's operations as they are. Nothing is ever re-run.
        """
        now = self.clock()
        stale = OperationRecord.lease_expires_at < now
        if at_start and (dead := await self._dead_local_executors()):
            stale = stale | OperationRecord.executor.in_(dead)
        lapsed = [OperationRecord.status == S.EXECUTING, stale]
        # An approval's deadline is its rule's timeout, applied with notifications by the approval
        # desk (``expire_approvals``): it may escalate rather than cancel.
        expired = [
            OperationRecord.status.in_(list(OPEN_STATES - {S.AWAITING_APPROVAL})),
            OperationRecord.expires_at <= now,
        ]
        if org_id is not None:
            lapsed.append(OperationRecord.org_id == org_id)
            expired.append(OperationRecord.org_id == org_id)
        async with self.db.session() as s:
            interrupted = await s.execute(
                update(OperationRecord)
                .where(*lapsed)
                .values(status=S.INTERRUPTED, status_reason=LEASE_LAPSED, updated_at=now)
                .execution_options(synchronize_session=False)
            )
            cancelled = await s.execute(
                update(OperationRecord)
                .where(*expired)
                .values(status=S.CANCELLED, status_reason=EXPIRED, updated_at=now, completed_at=now)
                .execution_options(synchronize_session=False)
            )
        return interrupted.rowcount, cancelled.rowcount

    async def _dead_local_executors(self) -> list[str]:
        stmt = select(OperationRecord.executor).where(OperationRecord.status == S.EXECUTING).distinct()
        async with self.db.session() as s:
            executors = list(await s.scalars(stmt))
        return [e for e in executors if e and e != self.instance_id and executor_is_gone(e)]

    # -- reads -----------------------------------------------------------------------------------

    async def get(self, op_id: str, *, org_id: str | None = None) -> OperationRecord:
        """The operation, after lapsed leases and expiry are applied; NotFound outside ``org_id``."""
        row = await self._read(op_id, org_id)
        if row is not None and self._stale(row):
            await self.recover(org_id=row.org_id)
            row = await self._read(op_id, org_id)
        if row is None:
            raise NotFound(f"No operation '{op_id}' in this organisation.", param="operation_id")
        return row

    async def list(self, org_id: str, query: OperationQuery) -> list[OperationRecord]:
        """Newest first; ``after`` is the last id of the previous page."""
        await self.recover(org_id=org_id)
        stmt = select(OperationRecord).where(OperationRecord.org_id == org_id)
        if query.status is not None:
            stmt = stmt.where(OperationRecord.status == query.status.value)
        if query.agent is not None:
            stmt = stmt.where(OperationRecord.agent == query.agent)
        if query.session_key is not None:
            stmt = stmt.where(OperationRecord.session_key == query.session_key)
        if query.after is not None:
            stmt = stmt.where(OperationRecord.id < query.after)
        if query.end_user_only:
            requested_by = OperationRecord.requested_by
            stmt = stmt.where(
                requested_by.is_(None) if query.end_user is None else requested_by == query.end_user
            )
        stmt = stmt.order_by(OperationRecord.id.desc()).limit(query.limit)
        async with self.db.session() as s:
            return list(await s.scalars(stmt))

    async def pending_for(self, org_id: str, agent: str, session_key: str) -> OperationRecord | None:
        """The conversation's operation awaiting confirmation (even if just expired), newest first."""
        stmt = (
            select(OperationRecord)
            .where(
                *_conversation(org_id, agent, session_key),
                OperationRecord.status == S.AWAITING_CONFIRMATION,
            )
            .order_by(OperationRecord.id.desc())
            .limit(1)
        )
        async with self.db.session() as s:
            return await s.scalar(stmt)

    async def awaiting_from(self, org_id: str, response_ids: list[str]) -> dict[str, OperationRecord]:
        """The operations these responses' runs left awaiting their end user's confirmation, by
        response id (an A2A task is then ``input-required``)."""
        if not response_ids:
            return {}
        stmt = select(OperationRecord).where(
            OperationRecord.org_id == org_id,
            OperationRecord.response_id.in_(response_ids),
            OperationRecord.status == S.AWAITING_CONFIRMATION,
        )
        async with self.db.session() as s:
            return {op.response_id: op for op in await s.scalars(stmt) if op.response_id is not None}

    async def wait_for_outcome(self, op_id: str, seconds: float, interval: float = 0.05) -> OperationRecord:
        """Poll until the operation leaves EXECUTING (another executor's outcome) or ``seconds`` pass;
        the polls space out from ``interval`` to half a second."""
        deadline = time.monotonic() + seconds
        while True:
            row = await self.get(op_id)
            left = deadline - time.monotonic()
            if row.state is not S.EXECUTING or left <= 0:
                return row
            await asyncio.sleep(min(interval, left))
            interval = min(interval * 1.5, 0.5)

    # -- questions and what a reply answers ------------------------------------------------------

    async def file_question(self, op: OperationRecord, turn_key: str) -> None:
        """Record that ``op``'s question was put to the user (again) in the turn ``turn_key``."""
        stmt = (
            self.db.insert(OperationQuestion)
            .values(turn_key=turn_key, operation_id=op.id, org_id=op.org_id, asked_at=self.clock())
            .on_conflict_do_nothing()
        )
        async with self.db.session() as s:
            await s.execute(stmt)

    async def asked_in(self, org_id: str, turn_key: str) -> list[OperationRecord]:
        """The operations whose question was asked in the turn ``turn_key``, the latest asked first."""
        stmt = (
            select(OperationRecord)
            .join(OperationQuestion, OperationQuestion.operation_id == OperationRecord.id)
            .where(
                OperationQuestion.turn_key == turn_key,
                OperationQuestion.org_id == org_id,
                OperationRecord.org_id == org_id,
            )
            .order_by(OperationQuestion.asked_at.desc(), OperationRecord.id.desc())
            .limit(_TURN_CANDIDATES)
        )
        async with self.db.session() as s:
            return list(await s.scalars(stmt))

    async def questions_of(self, org_id: str, agent: str, session_key: str) -> list[OperationRecord]:
        """The conversation's latest operations that asked the user something, newest first."""
        stmt = (
            select(OperationRecord)
            .where(
                *_conversation(org_id, agent, session_key),
                OperationRecord.confirmation_message.is_not(None),
            )
            .order_by(OperationRecord.id.desc())
            .limit(_TURN_CANDIDATES)
        )
        async with self.db.session() as s:
            return list(await s.scalars(stmt))

    async def recent_executions(self, twin: OperationRecord, *, since: datetime) -> list[OperationRecord]:
        """The operations of ``twin``'s conversation and end user set executing since ``since`` that
        may have run (not FAILED), newest first."""
        if twin.session_key is None:
            return []
        stmt = (
            select(OperationRecord)
            .where(
                *_same_conversation(twin),
                OperationRecord.id != twin.id,
                OperationRecord.status.in_([S.EXECUTING, S.COMPLETED, S.INTERRUPTED]),
                OperationRecord.confirmed_at >= since,
            )
            .order_by(OperationRecord.confirmed_at.desc())
            .limit(_TURN_CANDIDATES)
        )
        async with self.db.session() as s:
            return list(await s.scalars(stmt))

    async def last_confirmed(
        self, org_id: str, agent: str, session_key: str, requested_by: str | None, *, since: datetime
    ) -> OperationRecord | None:
        """The conversation's operation a user confirmed last, if it executes still or finished since
        ``since`` (a bare yes moments after a confirmation is that confirmation again)."""
        stmt = (
            select(OperationRecord)
            .where(
                *_conversation(org_id, agent, session_key),
                _requested_by(requested_by),
                OperationRecord.confirmed_at.is_not(None),
                OperationRecord.confirmed_via != "policy",
                (OperationRecord.status == S.EXECUTING) | (OperationRecord.completed_at >= since),
            )
            .order_by(OperationRecord.confirmed_at.desc())
            .limit(1)
        )
        async with self.db.session() as s:
            return await s.scalar(stmt)

    def is_expired(self, op: OperationRecord) -> bool:
        return op.state.is_open and op.state is not S.AWAITING_APPROVAL and op.expires_at <= self.clock()

    # -- internals -------------------------------------------------------------------------------

    def _stale(self, row: OperationRecord) -> bool:
        now = self.clock()
        lapsed = row.state is S.EXECUTING and row.lease_expires_at is not None and row.lease_expires_at < now
        return lapsed or self.is_expired(row)

    async def _read(self, op_id: str, org_id: str | None) -> OperationRecord | None:
        if "\x00" in op_id or len(op_id) > 40:  # no id holds one, and PostgreSQL refuses it in a query
            return None
        stmt = select(OperationRecord).where(OperationRecord.id == op_id)
        if org_id is not None:
            stmt = stmt.where(OperationRecord.org_id == org_id)
        async with self.db.session() as s:
            return await s.scalar(stmt)

    def _supersede_stmt(
        self, newer: OperationRecord, states: Iterable[OperationStatus], now: datetime
    ) -> Any:
        return (
            update(OperationRecord)
            .where(
                OperationRecord.org_id == newer.org_id,
                OperationRecord.agent == newer.agent,
                OperationRecord.session_key == newer.session_key,
                _requested_by(newer.requested_by),  # another end user's question is not ours to drop
                OperationRecord.id != newer.id,
                OperationRecord.status.in_([s.value for s in states]),
            )
            .values(
                status=S.CANCELLED,
                status_reason=f"superseded by {newer.id}: a newer request in the conversation",
                updated_at=now,
                completed_at=now,
            )
            .execution_options(synchronize_session=False)
        )
