"""The delivery log of approval notifications: one row per (event, webhook), retried until delivered.

A row is written ``pending`` with the payload exactly as it will be sent. Any replica may send it: a
dispatcher first claims the row with a compare-and-set (``UPDATE … WHERE id = … AND status =
'pending' AND (claim_expires_at IS NULL OR claim_expires_at < now)``), so two replicas never send
the same delivery at the same moment; a claim that lapses (its replica died mid-send) is taken over,
which makes delivery at-least-once: receivers deduplicate by ``X-Hatchway-Delivery``. Each attempt
ends the claim: ``delivered``, ``failed``, or ``pending`` again with ``next_attempt_at`` pushed back.
"""

from __future__ import annotations

import os
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.ids import new_id
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

MAX_ERROR = 300
"""``last_error`` is cut to this many characters."""


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class ApprovalDelivery(Base):
    """One notification of one event to one webhook, and how its attempts went."""

    __tablename__ = "approval_deliveries"
    __table_args__ = (
        Index("ix_approval_deliveries_due", "status", "next_attempt_at"),
        Index("ix_approval_deliveries_operation", "org_id", "operation_id", "created_at"),
        Index("ix_approval_deliveries_org_id_id", "org_id", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    operation_id: Mapped[str] = mapped_column(String(40))
    webhook: Mapped[str] = mapped_column(String(64))
    """``operations.approvals.webhooks[].name``: its URL and key are read from the settings when sent."""
    event: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The body, exactly as it is sent (already in the webhook's format)."""
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column()
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(MAX_ERROR))
    """Why the last attempt failed, in a few words: never a URL, a header or a secret."""
    claimed_by: Mapped[str | None] = mapped_column(String(300))
    claim_expires_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column()


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """When a failed delivery is tried again: the wait doubles from ``backoff_seconds`` after each
    attempt, up to ``max_backoff_seconds``, "equal jitter" (half fixed, half random) so that waits
    never shrink from one attempt to the next yet receivers back from an outage are not hit at once."""

    attempts: int = 8
    backoff_seconds: float = 2.0
    max_backoff_seconds: float = 600.0
    random: Callable[[], float] = field(default=random.random, repr=False)

    def wait(self, attempts_made: int, retry_after: float | None = None) -> float | None:
        """Seconds before the next attempt, or None when ``attempts_made`` used them all up."""
        if attempts_made >= self.attempts:
            return None
        cap = min(self.max_backoff_seconds, self.backoff_seconds * 2 ** (attempts_made - 1))
        wait = cap / 2 + cap / 2 * self.random()
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_backoff_seconds))
        return wait


@dataclass(frozen=True, slots=True)
class DeliveryDraft:
    """A delivery to write: the webhook's name, the event and the body already built."""

    id: str
    org_id: str
    operation_id: str
    webhook: str
    event: str
    payload: dict[str, Any]


def new_delivery_id() -> str:
    return new_id("whd")


def dispatcher_id() -> str:
    """``host:pid:nonce``: who holds a claim (a log line tells which replica sent what)."""
    return f"{socket.gethostname()[:255]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class ApprovalDeliveries:
    """The delivery log in the database; every change of a row is a compare-and-set on its claim."""

    def __init__(
        self, db: Database, schedule: RetrySchedule, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.db = db
        self.schedule = schedule
        self.clock = clock

    async def insert(self, drafts: list[DeliveryDraft]) -> None:
        """Write the deliveries ``pending``, due at once, in one transaction."""
        if not drafts:
            return
        now = self.clock()
        async with self.db.session() as s:
            s.add_all(
                ApprovalDelivery(
                    id=d.id,
                    org_id=d.org_id,
                    operation_id=d.operation_id,
                    webhook=d.webhook,
                    event=d.event,
                    payload=d.payload,
                    status=DeliveryStatus.PENDING.value,
                    attempts=0,
                    next_attempt_at=now,
                    created_at=now,
                )
                for d in drafts
            )

    async def claim_due(self, owner: str, *, limit: int, lease_seconds: float) -> list[ApprovalDelivery]:
        """Claim up to ``limit`` due deliveries for ``owner`` for ``lease_seconds``; those another
        dispatcher claimed first are skipped."""
        now = self.clock()
        async with self.db.session() as s:
            ids = list(
                await s.scalars(
                    select(ApprovalDelivery.id)
                    .where(*_claimable(now), ApprovalDelivery.next_attempt_at <= now)
                    .order_by(ApprovalDelivery.next_attempt_at)
                    .limit(limit)
                )
            )
        claimed = [i for i in ids if await self._claim(i, owner, now, lease_seconds)]
        if not claimed:
            return []
        async with self.db.session() as s:
            rows = await s.scalars(
                select(ApprovalDelivery)
                .where(ApprovalDelivery.id.in_(claimed), ApprovalDelivery.claimed_by == owner)
                .order_by(ApprovalDelivery.next_attempt_at)
            )
            return list(rows)

    async def _claim(self, delivery_id: str, owner: str, now: datetime, lease_seconds: float) -> bool:
        stmt = (
            update(ApprovalDelivery)
            .where(ApprovalDelivery.id == delivery_id, *_claimable(now))
            .values(claimed_by=owner, claim_expires_at=now + timedelta(seconds=lease_seconds))
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def record_success(self, row: ApprovalDelivery, owner: str, status_code: int) -> bool:
        """The attempt was answered 2xx: ``delivered``. False when ``owner`` no longer held the claim."""
        now = self.clock()
        return await self._finish(
            row,
            owner,
            status=DeliveryStatus.DELIVERED.value,
            last_status_code=status_code,
            last_error=None,
            delivered_at=now,
        )

    async def record_failure(
        self,
        row: ApprovalDelivery,
        owner: str,
        *,
        error: str,
        status_code: int | None = None,
        retry: bool = True,
        retry_after: float | None = None,
    ) -> DeliveryStatus:
        """The attempt failed: ``pending`` again after the schedule's wait, or ``failed`` when it
        must not be retried (``retry=False``) or was the last one. Returns the row's new status."""
        wait = self.schedule.wait(row.attempts + 1, retry_after) if retry else None
        status = DeliveryStatus.FAILED if wait is None else DeliveryStatus.PENDING
        values: dict[str, Any] = {"status": status.value}
        if wait is not None:
            values["next_attempt_at"] = self.clock() + timedelta(seconds=wait)
        await self._finish(row, owner, last_status_code=status_code, last_error=error[:MAX_ERROR], **values)
        return status

    async def _finish(self, row: ApprovalDelivery, owner: str, **values: Any) -> bool:
        stmt = (
            update(ApprovalDelivery)
            .where(
                ApprovalDelivery.id == row.id,
                ApprovalDelivery.status == DeliveryStatus.PENDING.value,
                ApprovalDelivery.claimed_by == owner,
            )
            .values(attempts=ApprovalDelivery.attempts + 1, claimed_by=None, claim_expires_at=None, **values)
            .execution_options(synchronize_session=False)
        )
        async with self.db.session() as s:
            return (await s.execute(stmt)).rowcount == 1

    async def for_operation(self, org_id: str, operation_id: str) -> list[ApprovalDelivery]:
        """The operation's deliveries, oldest first."""
        async with self.db.session() as s:
            rows = await s.scalars(
                select(ApprovalDelivery)
                .where(ApprovalDelivery.org_id == org_id, ApprovalDelivery.operation_id == operation_id)
                .order_by(ApprovalDelivery.created_at, ApprovalDelivery.id)
            )
            return list(rows)

    async def for_org(
        self, org_id: str, *, status: DeliveryStatus | None = None, after: str | None = None, limit: int = 50
    ) -> list[ApprovalDelivery]:
        """The organisation's deliveries, newest first; ``after`` is the last id of the previous page."""
        stmt = select(ApprovalDelivery).where(ApprovalDelivery.org_id == org_id)
        if status is not None:
            stmt = stmt.where(ApprovalDelivery.status == status.value)
        if after is not None:
            stmt = stmt.where(ApprovalDelivery.id < after)
        async with self.db.session() as s:
            rows = await s.scalars(stmt.order_by(ApprovalDelivery.id.desc()).limit(limit))
            return list(rows)


def _claimable(now: datetime) -> list[Any]:
    return [
        ApprovalDelivery.status == DeliveryStatus.PENDING.value,
        or_(ApprovalDelivery.claim_expires_at.is_(None), ApprovalDelivery.claim_expires_at < now),
    ]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def delivery_to_dict(row: ApprovalDelivery) -> dict[str, Any]:
    """A delivery as the API shows it: how its attempts went, never its body nor where it went."""
    return {
        "id": row.id,
        "object": "approval.delivery",
        "operation_id": row.operation_id,
        "webhook": row.webhook,
        "event": row.event,
        "status": row.status,
        "attempts": row.attempts,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "next_attempt_at": _iso(row.next_attempt_at) if row.status == DeliveryStatus.PENDING else None,
        "created_at": _iso(row.created_at),
        "delivered_at": _iso(row.delivered_at),
    }
