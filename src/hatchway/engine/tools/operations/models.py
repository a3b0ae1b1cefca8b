"""The durable operation record and its states.

    COLLECTING_PARAMETERS → PRE_VALIDATION → AWAITING_CONFIRMATION → EXECUTING → COMPLETED
                                           ↘ AWAITING_APPROVAL ↗

An operation whose policy names approvers other than the end user (``approvals`` in
tool_policies.yaml, or a tainted run's ``guards.confirm_when_tainted: {group: …}``) waits in
AWAITING_APPROVAL instead of asking the end user; ``approvals.py`` collects the approvals
(``OperationApproval``) and executes it once the policy is satisfied.

and off the main path: CANCELLED (user's no, superseded, expired), OUT_OF_SCOPE (validator said not
eligible), FAILED, INTERRUPTED. A call missing required arguments stays in COLLECTING_PARAMETERS.

COMPLETED means the primary tool answered; its ``verdict`` says SUCCESS / PARTIAL_SUCCESS / FAILED.
FAILED means the operation could not run (validator down with ``fail_open: false``, server
unreachable). INTERRUPTED means the executor stopped (crash, timeout) and the outcome is unknown:
it is reported, never re-run.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy import DDL, JSON, Index, String, Text, event
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.tables import Base, utcnow


class OperationStatus(StrEnum):
    COLLECTING_PARAMETERS = "COLLECTING_PARAMETERS"
    PRE_VALIDATION = "PRE_VALIDATION"
    AWAITING_CONFIRMATION = "AWAITING_CONFIRMATION"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    EXECUTING = "EXECUTING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    OUT_OF_SCOPE = "OUT_OF_SCOPE"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"

    @property
    def is_open(self) -> bool:
        """Not yet executing nor finished: may still be superseded, expired or cancelled."""
        return self in OPEN_STATES


OPEN_STATES = frozenset(
    {
        OperationStatus.COLLECTING_PARAMETERS,
        OperationStatus.PRE_VALIDATION,
        OperationStatus.AWAITING_CONFIRMATION,
        OperationStatus.AWAITING_APPROVAL,
    }
)
_AWAITING = "status = 'AWAITING_CONFIRMATION'"


class OperationRecord(Base):
    """One logical operation: what was asked, what was confirmed, what ran and how each item ended."""

    __tablename__ = "operations"
    __table_args__ = (
        Index("ix_operations_org_id_id", "org_id", "id"),
        Index("ix_operations_session", "org_id", "agent", "session_key", "status"),
        Index("ix_operations_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    agent: Mapped[str] = mapped_column(String(128))
    session_key: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32))
    status_reason: Mapped[str | None] = mapped_column(Text)
    tool: Mapped[str] = mapped_column(String(128))
    server: Mapped[str] = mapped_column(String(128))
    operation_type: Mapped[str] = mapped_column(String(32))
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Snapshot of the resolved policy (source, requires, pre_validation, execution)."""
    call_id: Mapped[str | None] = mapped_column(String(256))
    response_id: Mapped[str | None] = mapped_column(String(64))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    resolved_arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    arguments_digest: Mapped[str | None] = mapped_column(String(64))
    confirmation_message: Mapped[str | None] = mapped_column(Text)
    pre_validation: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    requested_by: Mapped[str | None] = mapped_column(String(256))
    confirmed_by: Mapped[str | None] = mapped_column(String(256))
    confirmed_via: Mapped[str | None] = mapped_column(String(16))
    executor: Mapped[str | None] = mapped_column(String(300))
    lease_expires_at: Mapped[datetime | None] = mapped_column()
    verdict: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    items: Mapped[list[Any] | None] = mapped_column(JSON)
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    confirmed_at: Mapped[datetime | None] = mapped_column()
    started_at: Mapped[datetime | None] = mapped_column()
    completed_at: Mapped[datetime | None] = mapped_column()
    repeat_of: Mapped[str | None] = mapped_column(String(40))
    """An operation of the same conversation and end user that did the same (tool and resolved
    arguments) moments before: this one asks again, saying so, and only a reply bound to its own
    question confirms it (``operations.repeat_window_seconds``)."""

    approval: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The approval rule that applies, as decided when the operation was frozen (``approvals.py``):
    rule, approvers, required, stage, timeouts, ``tainted_by``; None: the end user confirms."""
    outcome_reported_at: Mapped[datetime | None] = mapped_column()
    """When the requester's conversation was told the outcome of an approved (or rejected, or
    timed-out) operation: once, on its next turn."""

    @property
    def state(self) -> OperationStatus:
        return OperationStatus(self.status)


# At most one pending confirmation per conversation: the database keeps the invariant, with a partial
# unique index (migration 0004 creates it; this says so to `create_all`). Written as DDL, which both
# SQLite and PostgreSQL read as is, rather than as an Index with ``postgresql_where``: SQLAlchemy
# would import its PostgreSQL dialect, every driver's module of it (~2 MiB), to check that argument
# in every gateway, SQLite ones included.
event.listen(
    OperationRecord.__table__,
    "after_create",
    DDL(
        "CREATE UNIQUE INDEX ux_operations_one_pending ON operations (org_id, agent, session_key) "
        f"WHERE {_AWAITING}"
    ),
)


class OperationQuestion(Base):
    """One time an operation's question was put to the user: under which turn of which conversation.

    ``turn_key`` digests the conversation (organisation, agent, session) and the user messages the
    question answered (``engine/tools/operations/turns.py``); a reply that carries those same user
    messages before its own answers this question, whatever else it says.
    """

    __tablename__ = "operation_questions"

    turn_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    operation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    asked_at: Mapped[datetime] = mapped_column(default=utcnow)


class OperationApproval(Base):
    """One approver's decision on one operation, bound to the arguments it saw.

    The primary key makes a decision idempotent: the same person deciding the same operation the same
    way, at the same stage, on the same arguments is one row however often it is sent. Only rows whose digest
    is the operation's current ``arguments_digest`` and whose stage is its current stage count.
    """

    __tablename__ = "operation_approvals"

    operation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    approver: Mapped[str] = mapped_column(String(256), primary_key=True)
    stage: Mapped[int] = mapped_column(primary_key=True)
    arguments_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    decision: Mapped[str] = mapped_column(String(16), primary_key=True)
    """``approve`` or ``reject`` (both may stand: a person who approved, then rejected)."""
    org_id: Mapped[str] = mapped_column(String(40))
    comment: Mapped[str | None] = mapped_column(Text)
    via: Mapped[str] = mapped_column(String(16))
    """``sso`` (the dashboard, a signed-in person) or ``token`` (a key with a verified user token)."""
    actor: Mapped[str] = mapped_column(String(300))
    """The credential it came with (``key:…`` or ``person:…``), for the audit trail."""
    decided_at: Mapped[datetime] = mapped_column(default=utcnow)


def arguments_digest(arguments: Any) -> str:
    """SHA-256 of the canonical JSON of ``arguments`` (sorted keys, no spaces, UTF-8)."""
    return hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def operation_to_dict(op: OperationRecord) -> dict[str, Any]:
    """The operation as ``GET /v1/operations/{id}`` shows it (the evidence record)."""
    return {
        "id": op.id,
        "object": "operation",
        "status": op.status,
        "status_reason": op.status_reason,
        "agent": op.agent,
        "session_key": op.session_key,
        "tool": op.tool,
        "server": op.server,
        "operation_type": op.operation_type,
        "policy": op.policy,
        "call_id": op.call_id,
        "response_id": op.response_id,
        "arguments": op.arguments,
        "resolved_arguments": op.resolved_arguments,
        "arguments_digest": op.arguments_digest,
        "confirmation_message": op.confirmation_message,
        "pre_validation": op.pre_validation,
        "requested_by": op.requested_by,
        "confirmed_by": op.confirmed_by,
        "confirmed_via": op.confirmed_via,
        "verdict": op.verdict,
        "items": op.items,
        "result": op.result,
        "error": op.error,
        "created_at": _iso(op.created_at),
        "updated_at": _iso(op.updated_at),
        "expires_at": _iso(op.expires_at),
        "confirmed_at": _iso(op.confirmed_at),
        "started_at": _iso(op.started_at),
        "completed_at": _iso(op.completed_at),
        "repeat_of": op.repeat_of,
        "approval": op.approval,
    }
