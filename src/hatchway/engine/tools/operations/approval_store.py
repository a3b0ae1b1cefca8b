"""Approvals in the database: each decision, and the compare-and-sets an approval lives by.

``ApprovalRecords`` works beside ``OperationStore`` (``store.py``) on the same rows: the decisions
(``OperationApproval``, idempotent by their key), the inbox's reads, the timeouts (escalate once, or
cancel) and the outcomes a conversation is told. Every change to an operation awaiting approval is
a compare-and-set on its status and ``updated_at`` (``_change_awaiting``), which an escalation, a
timeout or a rejection moves: replicas sweeping or deciding at once change it once.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from hatchway.engine.tools.operations.models import OperationApproval, OperationRecord, OperationStatus
from hatchway.engine.tools.operations.store import OperationStore, _clean, _conversation, _requested_by

S = OperationStatus


class ApprovalRecords:
    """The approvals of ``store``'s operations."""

    def __init__(self, store: OperationStore) -> None:
        self.store = store

    async def add_decision(self, row: OperationApproval) -> bool:
        """Record one approver's decision; False when the same one was recorded before (idempotent:
        the key is operation, approver, stage and arguments digest)."""
        values = {c.name: getattr(row, c.name) for c in OperationApproval.__table__.columns}
        stmt = self.store.db.insert(OperationApproval).values(**_clean(values)).on_conflict_do_nothing()
        async with self.store.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def reject(self, op: OperationRecord, reason: str) -> bool:
        """AWAITING_APPROVAL → CANCELLED, only if the row is still the one ``op`` was read as (same
        stage, same arguments)."""
        now = self.store.clock()
        return await self._change_awaiting(
            op, now, status=S.CANCELLED, status_reason=reason, completed_at=now
        )

    async def _change_awaiting(self, op: OperationRecord, now: datetime, **values: Any) -> bool:
        """Set ``values`` on ``op`` if it still awaits approval as it was read (its ``updated_at``,
        which an escalation, a timeout or a rejection moves): a compare-and-set."""
        stmt = (
            update(OperationRecord)
            .where(
                OperationRecord.id == op.id,
                OperationRecord.status == S.AWAITING_APPROVAL,
                OperationRecord.updated_at == op.updated_at,
            )
            .values(updated_at=now, **_clean(values))
            .execution_options(synchronize_session=False)
        )
        async with self.store.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def approvers_of(self, op_id: str, *, stage: int, digest: str) -> list[str]:
        """The distinct approvers whose approval counts: this stage, these arguments (read in a
        transaction of its own, after the caller's decision committed)."""
        stmt = select(OperationApproval.approver).where(
            OperationApproval.operation_id == op_id,
            OperationApproval.stage == stage,
            OperationApproval.arguments_digest == digest,
            OperationApproval.decision == "approve",
        )
        async with self.store.db.session() as s:
            return sorted(set(await s.scalars(stmt)))

    async def decisions(self, op_ids: list[str]) -> list[OperationApproval]:
        """Every decision recorded on these operations, oldest first."""
        if not op_ids:
            return []
        stmt = (
            select(OperationApproval)
            .where(OperationApproval.operation_id.in_(op_ids))
            .order_by(OperationApproval.decided_at)
        )
        async with self.store.db.session() as s:
            return list(await s.scalars(stmt))

    async def awaiting_approval(
        self, org_id: str, *, after: str | None = None, limit: int = 200
    ) -> list[OperationRecord]:
        """The organisation's operations awaiting approval, newest first."""
        stmt = select(OperationRecord).where(
            OperationRecord.org_id == org_id, OperationRecord.status == S.AWAITING_APPROVAL
        )
        if after is not None:
            stmt = stmt.where(OperationRecord.id < after)
        stmt = stmt.order_by(OperationRecord.id.desc()).limit(limit)
        async with self.store.db.session() as s:
            return list(await s.scalars(stmt))

    async def expire_approvals(
        self, reason: str, *, org_id: str | None = None, batch: int = 100
    ) -> list[tuple[OperationRecord, str]]:
        """Approvals past their deadline: escalated once where the rule says so, else CANCELLED with
        ``reason``. Each change is a compare-and-set on the row's version, so replicas sweeping at
        once change each operation once. Returns the changed operations and their event."""
        now = self.store.clock()
        stmt = select(OperationRecord).where(
            OperationRecord.status == S.AWAITING_APPROVAL, OperationRecord.expires_at <= now
        )
        if org_id is not None:
            stmt = stmt.where(OperationRecord.org_id == org_id)
        async with self.store.db.session() as s:
            due = list(await s.scalars(stmt.order_by(OperationRecord.expires_at).limit(batch)))
        changed: list[tuple[OperationRecord, str]] = []
        for op in due:
            outcome, approval, deadline = _timed_out(op, now)
            values: dict[str, Any]
            if outcome == "escalate":
                values = {"approval": approval, "expires_at": deadline, "status": S.AWAITING_APPROVAL}
                event = "approval.escalated"
            else:
                values = {"status": S.CANCELLED, "status_reason": reason, "completed_at": now}
                event = "approval.decided"
            if await self._change_awaiting(op, now, **values):
                changed.append((await self.store.get(op.id), event))
        return changed

    async def unreported_outcomes(
        self, org_id: str, agent: str, session_key: str, requested_by: str | None, *, limit: int = 5
    ) -> list[OperationRecord]:
        """Operations of the conversation and end user that waited for approval and have ended
        since, not yet told to the conversation; each is returned once (marked as it is read)."""
        stmt = (
            select(OperationRecord)
            .where(
                *_conversation(org_id, agent, session_key),
                _requested_by(requested_by),
                OperationRecord.approval.is_not(None),
                OperationRecord.outcome_reported_at.is_(None),
                OperationRecord.status.in_([S.COMPLETED, S.CANCELLED, S.FAILED, S.INTERRUPTED]),
            )
            .order_by(OperationRecord.id)
            .limit(limit)
        )
        async with self.store.db.session() as s:
            candidates = list(await s.scalars(stmt))
        reported = []
        for op in candidates:
            mark = (
                update(OperationRecord)
                .where(OperationRecord.id == op.id, OperationRecord.outcome_reported_at.is_(None))
                .values(outcome_reported_at=self.store.clock())
                .execution_options(synchronize_session=False)
            )
            async with self.store.db.session() as s:
                if (await s.execute(mark)).rowcount == 1:
                    reported.append(op)
        return reported

    async def mark_reported(self, op_id: str) -> None:
        """The outcome reached the requester another way (the run that waited for it)."""
        stmt = (
            update(OperationRecord)
            .where(OperationRecord.id == op_id, OperationRecord.outcome_reported_at.is_(None))
            .values(outcome_reported_at=self.store.clock())
            .execution_options(synchronize_session=False)
        )
        async with self.store.db.session() as s:
            await s.execute(stmt)

    async def wait_for_decision(self, op_id: str, seconds: float) -> OperationRecord:
        """Poll until the operation leaves AWAITING_APPROVAL and EXECUTING (approved and executed,
        rejected, timed out) or ``seconds`` pass; polls space out from 0.2 to 2 seconds."""
        deadline = time.monotonic() + seconds
        interval = 0.2
        while True:
            row = await self.store.get(op_id)
            left = deadline - time.monotonic()
            if row.state not in (S.AWAITING_APPROVAL, S.EXECUTING) or left <= 0:
                return row
            await asyncio.sleep(min(interval, left))
            interval = min(interval * 1.5, 2.0)


def _timed_out(op: OperationRecord, now: datetime) -> tuple[str, dict[str, Any] | None, Any]:
    """What a timed-out approval becomes: (``escalate``, new snapshot, new deadline) or
    (``cancel``, None, None)."""
    approval = dict(op.approval or {})
    if (
        approval.get("on_timeout") == "escalate"
        and approval.get("stage", 0) == 0
        and approval.get("escalate_to")
    ):
        approval["stage"] = 1
        approval["escalated_at"] = now.isoformat()
        seconds = float(
            approval.get("escalation_timeout_seconds") or approval.get("timeout_seconds") or 86400
        )
        return "escalate", approval, now + timedelta(seconds=seconds)
    return "cancel", None, None
