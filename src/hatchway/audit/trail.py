"""The audit trail in the database: record, list, export and verify each organisation's chain.

Appends are serialised per organisation, on every backend and across replicas. Each append's first
statement inserts the organisation's head row if it is missing (``ON CONFLICT DO NOTHING``): on
SQLite that first write takes the database's write lock, waiting up to ``busy_timeout`` for another
writer, and holds it until the commit. Reading the head first would not do: Python's sqlite3 begins
the transaction only at the first write, so two replicas could read the same head; and a transaction
that has read cannot wait for the lock — it fails at once with "database is locked" when another
writer committed in between. On PostgreSQL the head row is then read ``FOR UPDATE``, so a second
replica's append waits for the first to commit and continues from its entry. The primary key
(org_id, seq) is the last guard: a duplicate seq fails the insert, and the append is retried.

Each entry is also logged to ``hatchway.audit`` (``audit.otel_logs``), see ``AUDIT_LOG``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, union, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from hatchway.audit.chain import Signer, entry_hash, format_time, genesis_hash
from hatchway.audit.entries import AuditEntry, AuditEvent, check_detail
from hatchway.audit.exports import export_header
from hatchway.audit.store import AuditCheckpoint, AuditEntryRow, AuditHead
from hatchway.audit.verify import ChainBreak, ChainVerifier, OrgVerification, VerifyReport
from hatchway.config.access import AuditSettings
from hatchway.errors import MasterKeyError
from hatchway.observability.log_redaction import SecretLogFilter
from hatchway.store.columns import clean_text
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from hatchway.vault.master_key import MasterKey

logger = logging.getLogger(__name__)
AUDIT_LOG = logging.getLogger("hatchway.audit")
"""One structured line per entry (``audit {…}``): an OpenTelemetry log record wherever an OTel
logging handler is attached to Python logging. Secret values are scrubbed from it like from the
libraries' lines."""
AUDIT_LOG.addFilter(SecretLogFilter())

_APPEND_ATTEMPTS = 5
_PAGE = 500
MAX_LIST = 1000
_LENGTHS = {"actor": 256, "action": 64, "target": 512, "source": 128, "request_id": 64}


def _entry(row: AuditEntryRow) -> AuditEntry:
    return AuditEntry(
        org_id=row.org_id,
        seq=row.seq,
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        outcome=row.outcome,
        source=row.source,
        request_id=row.request_id,
        detail=row.detail,
        prev_hash=row.prev_hash,
        hash=row.hash,
    )


def _fitted(event: AuditEvent) -> dict[str, Any]:
    """The event's strings as the columns take them (cleaned, cut): what is stored is what is hashed."""
    return {
        name: None if value is None else clean_text(str(value), _LENGTHS[name])
        for name, value in (
            ("actor", event.actor),
            ("action", event.action),
            ("target", event.target),
            ("source", event.source),
            ("request_id", event.request_id),
        )
    }


def _signed_record(kind: str, row: AuditHead | AuditCheckpoint) -> dict[str, Any]:
    record = {"org_id": row.org_id, "seq": row.seq, "hash": row.hash}
    if isinstance(row, AuditCheckpoint):
        record["at"] = format_time(row.at)
    return {"type": kind, **record, "key_id": row.key_id, "signature": row.signature}


LOST_HEAD = "lost"
"""The ``key_id`` of a head that was found removed: never signed again, so ``verify`` fails for good."""


@dataclass(frozen=True, slots=True)
class ResignResult:
    """What ``AuditTrail.resign`` did: signatures made again, organisations left (their chain broke)."""

    resigned: int
    refused: tuple[str, ...]


class AuditTrail:
    """Every organisation's tamper-evident record of who did what, in the database."""

    def __init__(
        self,
        db: Database,
        master_key: MasterKey | None,
        settings: AuditSettings,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        """Without ``master_key`` the trail can be read, exported and verified (signatures unchecked),
        not appended to."""
        self.db = db
        self.settings = settings
        self.signer = Signer(master_key) if master_key is not None else None
        self.clock = clock

    async def record(self, event: AuditEvent) -> AuditEntry:
        """Append ``event`` to its organisation's chain (signing the new head) and return the entry.

        Raises:
            InternalError: the event's detail names a secret-like key or is too large (a bug).
            MasterKeyError: this trail was built without a master key.
        """
        if self.signer is None:
            raise MasterKeyError("the audit trail cannot record without the master key")
        detail = check_detail(event)
        for attempt in range(1, _APPEND_ATTEMPTS + 1):
            try:
                entry = await self._append(event, detail, self.signer)
                break
            except IntegrityError:
                if attempt == _APPEND_ATTEMPTS:
                    raise
                logger.info("audit: seq taken in organisation %s; appending again", event.org_id)
        if self.settings.otel_logs:
            self._emit(entry)
        return entry

    async def _append(self, event: AuditEvent, detail: dict[str, Any], signer: Signer) -> AuditEntry:
        async with self.db.session() as s:
            seq, prev, lost = await self._lock_head(s, event.org_id, signer)
            entry = AuditEntry(
                org_id=event.org_id,
                seq=seq + 1,
                at=self.clock(),  # taken under the lock: times follow seqs within a replica
                outcome=event.outcome,
                detail=detail,
                prev_hash=prev,
                hash="",
                **_fitted(event),
            )
            entry = replace(entry, hash=entry_hash(entry.to_dict()))
            await self._write(s, entry, None if lost else signer)
        return entry

    async def _lock_head(self, s: AsyncSession, org_id: str, signer: Signer) -> tuple[int, str, bool]:
        """The organisation's head (seq, hash, lost), made if missing and held until the transaction
        ends. ``lost``: the head was once removed by hand (see ``_after_lost_head``)."""
        genesis = genesis_hash(org_id)
        # The first statement writes: on SQLite it takes the write lock before anything is read.
        await s.execute(
            self.db.insert(AuditHead)
            .values(
                org_id=org_id,
                seq=0,
                hash=genesis,
                key_id=signer.key_id,
                signature=signer.sign(org_id, 0, genesis),
            )
            .on_conflict_do_nothing(index_elements=["org_id"])
        )
        head = await s.execute(
            select(AuditHead.seq, AuditHead.hash, AuditHead.key_id)
            .where(AuditHead.org_id == org_id)
            .with_for_update()
        )
        seq, prev, key_id = head.one()
        if seq == 0 and (latest := await self._after_lost_head(s, org_id)) is not None:
            return (*latest, True)
        return seq, prev, key_id == LOST_HEAD

    async def _write(self, s: AsyncSession, entry: AuditEntry, signer: Signer | None) -> None:
        """The entry, the head moved onto it and signed, and a checkpoint when one is due. Without a
        signer (a chain whose head was lost) the head moves on unsigned, marked ``LOST_HEAD`` for good."""
        s.add(AuditEntryRow(**{**entry.to_dict(), "at": entry.at}))
        if signer is None:
            lost = {"seq": entry.seq, "hash": entry.hash, "key_id": LOST_HEAD, "signature": ""}
            await s.execute(update(AuditHead).where(AuditHead.org_id == entry.org_id).values(**lost))
            return
        signature = signer.sign(entry.org_id, entry.seq, entry.hash)
        signed = {"seq": entry.seq, "hash": entry.hash, "key_id": signer.key_id, "signature": signature}
        await s.execute(update(AuditHead).where(AuditHead.org_id == entry.org_id).values(**signed))
        if entry.seq % self.settings.checkpoint_every == 0:
            s.add(AuditCheckpoint(org_id=entry.org_id, at=entry.at, **signed))

    async def _after_lost_head(self, s: AsyncSession, org_id: str) -> tuple[int, str] | None:
        """The latest entry when the head row was gone though entries exist (deleted by hand): the
        chain goes on from it rather than every later append failing on a taken seq, but is never
        signed again (``LOST_HEAD``): signing now would bless whatever was done to its tail."""
        latest = await s.execute(
            select(AuditEntryRow.seq, AuditEntryRow.hash)
            .where(AuditEntryRow.org_id == org_id)
            .order_by(AuditEntryRow.seq.desc())
            .limit(1)
        )
        row = latest.one_or_none()
        if row is None:
            return None
        logger.warning(
            "audit: the head of organisation %s was missing; continuing after entry %s", org_id, row[0]
        )
        return row[0], row[1]

    @staticmethod
    def _emit(entry: AuditEntry) -> None:
        AUDIT_LOG.info(
            "audit %s",
            json.dumps(entry.to_dict(), ensure_ascii=False, sort_keys=True),
            extra={
                "audit.org_id": entry.org_id,
                "audit.seq": entry.seq,
                "audit.actor": entry.actor,
                "audit.action": entry.action,
                "audit.target": entry.target,
                "audit.outcome": entry.outcome,
            },
        )

    async def list(
        self, org_id: str, *, since: datetime | None = None, after_seq: int | None = None, limit: int = 100
    ) -> list[AuditEntry]:
        """An organisation's entries in chain order: at or after ``since``, after ``after_seq`` (the
        last seq of the previous page), at most ``limit`` (capped at ``MAX_LIST``)."""
        query = select(AuditEntryRow).where(AuditEntryRow.org_id == org_id)
        if since is not None:
            query = query.where(AuditEntryRow.at >= since)
        if after_seq is not None:
            query = query.where(AuditEntryRow.seq > after_seq)
        query = query.order_by(AuditEntryRow.seq).limit(max(0, min(limit, MAX_LIST)))
        async with self.db.session() as s:
            return [_entry(row) for row in (await s.scalars(query)).all()]

    async def export(
        self, org_id: str | None = None, since: datetime | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The records of an export file (``exports.py``): a header, then per organisation its head,
        checkpoints and entries, each a JSON-ready dict."""
        yield export_header(org_id, since, self.clock())
        for org in [org_id] if org_id is not None else await self.org_ids():
            head, checkpoints = await self._signed(org)
            start = await self._export_start(org, since, checkpoints)
            if start is None:
                continue
            if head is not None:
                yield _signed_record("head", head)
            for checkpoint in checkpoints:
                if checkpoint.seq >= start - 1:
                    yield _signed_record("checkpoint", checkpoint)
            async for entry in self._entries(org, after=start - 1, upto=head.seq if head else None):
                yield {"type": "entry", **entry.to_dict()}

    async def _export_start(
        self, org_id: str, since: datetime | None, checkpoints: list[AuditCheckpoint]
    ) -> int | None:
        """The first seq to export: 1, or just after the last checkpoint before ``since``'s first
        entry (None when nothing is that recent)."""
        if since is None:
            return 1
        async with self.db.session() as s:
            first = await s.scalar(
                select(func.min(AuditEntryRow.seq)).where(
                    AuditEntryRow.org_id == org_id, AuditEntryRow.at >= since
                )
            )
        if first is None:
            return None
        return max([0, *(c.seq for c in checkpoints if c.seq < first)]) + 1

    async def verify(self, org_id: str | None = None) -> VerifyReport:
        """Check one organisation's chain, or every organisation's, against their signed heads and
        checkpoints (``verify.py`` says what each break means)."""
        orgs = [org_id] if org_id is not None else await self.org_ids()
        return VerifyReport(tuple([await self._verify_org(org) for org in orgs]))

    async def _verify_org(self, org_id: str) -> OrgVerification:
        head, checkpoints = await self._signed(org_id)
        verifier = ChainVerifier(
            org_id,
            head=_signed_record("head", head) if head else None,
            checkpoints=[_signed_record("checkpoint", c) for c in checkpoints],
            signer=self.signer,
            require_head=True,
        )
        # Up to the head read first: entries appended meanwhile come with a newer head.
        async with aclosing(self._entries(org_id, after=0, upto=head.seq if head else None)) as entries:
            async for entry in entries:
                if not verifier.feed(entry.to_dict()):
                    break
        report = verifier.finish()
        if report.ok and (beyond := await self._unsigned_tail(org_id)) is not None:
            problem = ChainBreak(beyond, "unsigned", f"entries from {beyond} on are past the signed head")
            report = replace(report, problem=problem)
        return report

    async def resign(self, new_key: MasterKey) -> ResignResult:
        """After a master key rotation: check each organisation's chain with this trail's (old) key,
        then sign its head and checkpoints again with ``new_key``, so ``verify`` keeps checking them
        under the new key. A chain that does not verify is left as it is (and named): re-signing it
        would bless the tampering. Run with every gateway stopped, as the rotation is."""
        if self.signer is None:
            raise MasterKeyError("re-signing the audit trail needs the previous master key")
        new = Signer(new_key)
        resigned, refused = 0, []
        for org_id in await self.org_ids():
            if not (await self._verify_org(org_id)).ok:
                refused.append(org_id)
                continue
            async with self.db.session() as s:
                head = await s.get(AuditHead, org_id)
                rows: list[AuditHead | AuditCheckpoint] = [head] if head is not None else []
                rows += await s.scalars(select(AuditCheckpoint).where(AuditCheckpoint.org_id == org_id))
                for row in rows:
                    if row.key_id == self.signer.key_id:
                        row.key_id, row.signature = new.key_id, new.sign(org_id, row.seq, row.hash)
                        resigned += 1
        return ResignResult(resigned, tuple(refused))

    async def _unsigned_tail(self, org_id: str) -> int | None:
        """The first entry past the organisation's head, read in one statement (one snapshot)."""
        head_seq = select(AuditHead.seq).where(AuditHead.org_id == org_id).scalar_subquery()
        async with self.db.session() as s:
            return await s.scalar(
                select(func.min(AuditEntryRow.seq)).where(
                    AuditEntryRow.org_id == org_id, AuditEntryRow.seq > func.coalesce(head_seq, 0)
                )
            )

    async def org_ids(self) -> list[str]:
        """Every organisation with a trail."""
        query = union(select(AuditEntryRow.org_id), select(AuditHead.org_id))
        async with self.db.session() as s:
            return sorted((await s.execute(query)).scalars())

    async def _signed(self, org_id: str) -> tuple[AuditHead | None, list[AuditCheckpoint]]:
        async with self.db.session() as s:
            head = await s.get(AuditHead, org_id)
            checkpoints = await s.scalars(
                select(AuditCheckpoint).where(AuditCheckpoint.org_id == org_id).order_by(AuditCheckpoint.seq)
            )
            return head, list(checkpoints)

    async def _entries(self, org_id: str, *, after: int, upto: int | None) -> AsyncIterator[AuditEntry]:
        """An organisation's entries from ``after + 1`` to ``upto``, a page per short transaction."""
        while True:
            query = select(AuditEntryRow).where(AuditEntryRow.org_id == org_id, AuditEntryRow.seq > after)
            if upto is not None:
                query = query.where(AuditEntryRow.seq <= upto)
            async with self.db.session() as s:
                rows = (await s.scalars(query.order_by(AuditEntryRow.seq).limit(_PAGE))).all()
            for row in rows:
                yield _entry(row)
            if len(rows) < _PAGE:
                return
            after = rows[-1].seq
