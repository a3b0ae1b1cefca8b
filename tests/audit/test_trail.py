"""The audit trail on SQLite and PostgreSQL: replicas appending at once, and every kind of tampering
found at the first bad entry."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
from sqlalchemy import delete, update

from hatchway.audit import AuditEntry, AuditTrail, verify_entries
from hatchway.audit.chain import entry_hash
from hatchway.audit.store import AuditCheckpoint, AuditEntryRow, AuditHead
from hatchway.config.access import AuditSettings
from hatchway.redaction import Redactor
from hatchway.store.db import Database
from hatchway.vault.master_key import MasterKey
from tests.audit.conftest import (
    TrailFactory,
    delete_entry,
    edit_entry,
    event,
    new_org,
    record_many,
    swap_seqs,
)

pytestmark = pytest.mark.anyio

ENTRIES = 12
"""Per tampered organisation, with a checkpoint every 5: checkpoints at 5 and 10, the head at 12."""


async def test_two_replicas_appending_at_once_make_one_gapless_chain_per_organisation(
    database_url: str, make_trail: TrailFactory
) -> None:
    replicas = [Database(database_url), Database(database_url)]
    await replicas[0].migrate()
    busy, quiet = new_org(), new_org()
    try:
        trails = [make_trail(db, checkpoint_every=10) for db in replicas]
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for replica, trail in enumerate(trails):
                    for n in range(50):
                        tg.start_soon(trail.record, event(busy, n, actor=f"key:replica_{replica}"))
                        if n % 5 == 0:
                            tg.start_soon(trail.record, event(quiet, n, actor=f"key:replica_{replica}"))
        report = await trails[1].verify(busy)
        assert report.ok, report
        assert (report.organisations[0].entries, report.organisations[0].signatures_checked) == (100, 11)
        entries = await trails[0].list(busy, limit=1000)
        assert [e.seq for e in entries] == list(range(1, 101))
        assert {e.actor for e in entries} == {"key:replica_0", "key:replica_1"}
        quiet_entries = await trails[1].list(quiet, limit=1000)
        assert [e.seq for e in quiet_entries] == list(range(1, 21))
        assert (await trails[0].verify(quiet)).ok
    finally:
        for db in replicas:
            await db.close()


async def test_a_recorded_entry_reads_back_and_hashes_the_same_on_every_backend(
    db: Database, make_trail: TrailFactory
) -> None:
    org = new_org()
    plus_two = timezone(timedelta(hours=2))
    times = iter(
        [datetime(2026, 1, 2, 5, 4, 5, 678901, tzinfo=plus_two), datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC)]
    )
    trail = make_trail(db, clock=lambda: next(times))
    written = [
        await trail.record(event(org, 1)),
        await trail.record(event(org, 2, detail={"f": 0.1, "u": "ç"})),
    ]
    read = await trail.list(org)
    assert [e.to_dict() for e in read] == [e.to_dict() for e in written]
    assert [e.to_dict()["at"] for e in read] == [
        "2026-01-02T03:04:05.678901+00:00",
        "2026-01-02T03:04:06.000000+00:00",
    ]
    assert all(entry_hash(e.to_dict()) == e.hash for e in read)
    assert read[1].prev_hash == read[0].hash


async def test_list_pages_by_seq_and_by_time(db: Database, make_trail: TrailFactory) -> None:
    org = new_org()
    start = datetime(2026, 3, 1, tzinfo=UTC)
    times = iter(start + timedelta(minutes=n) for n in range(10))
    trail = make_trail(db, clock=lambda: next(times))
    await record_many(trail, org, 10)
    assert [e.seq for e in await trail.list(org, after_seq=3, limit=4)] == [4, 5, 6, 7]
    assert [e.seq for e in await trail.list(org, since=start + timedelta(minutes=8))] == [9, 10]
    assert await trail.list(new_org()) == []


async def _tampered_org(db: Database, trail: AuditTrail) -> str:
    org = new_org()
    await record_many(trail, org, ENTRIES)
    assert (await trail.verify(org)).ok
    return org


def _other_value(field: str, entry: AuditEntry) -> Any:
    if field == "at":
        return entry.at + timedelta(microseconds=1)
    if field == "detail":
        return {**entry.detail, "n": -1}
    if field in ("prev_hash", "hash"):
        return "0" * 64
    return {"outcome": "denied", "seq": 1000 + entry.seq}.get(field, f"forged {field}")


@pytest.mark.parametrize(
    "field",
    [
        "at",
        "actor",
        "action",
        "target",
        "outcome",
        "source",
        "request_id",
        "detail",
        "prev_hash",
        "hash",
        "seq",
    ],
)
async def test_editing_any_field_of_any_entry_breaks_the_chain_at_that_entry(
    db: Database, make_trail: TrailFactory, field: str
) -> None:
    trail = make_trail(db)
    for seq in (1, 5, 7, ENTRIES):
        org = await _tampered_org(db, trail)
        [entry] = await trail.list(org, after_seq=seq - 1, limit=1)
        await edit_entry(db, org, seq, **{field: _other_value(field, entry)})
        [report] = (await trail.verify(org)).organisations
        assert report.problem is not None, (field, seq)
        assert report.problem.seq == seq, (field, seq, report.problem)
        assert report.entries == seq - 1
        expected = {"seq": ("removed", "truncated", "edited")}.get(field, ("edited",))
        assert report.problem.reason in expected, report.problem


@pytest.mark.parametrize(("seq", "reason"), [(1, "removed"), (6, "removed"), (ENTRIES, "truncated")])
async def test_a_deleted_entry_is_found(
    db: Database, make_trail: TrailFactory, seq: int, reason: str
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    await delete_entry(db, org, seq)
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (seq, reason), report.problem  # type: ignore[union-attr]


@pytest.mark.parametrize(("a", "b"), [(1, 2), (3, 8), (11, 12)])
async def test_two_entries_swapped_are_found_as_reordered(
    db: Database, make_trail: TrailFactory, a: int, b: int
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    await swap_seqs(db, org, a, b)
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (a, "reordered"), report.problem  # type: ignore[union-attr]


async def _rewrite_from_seven(db: Database, trail: AuditTrail, org: str) -> dict[int, str]:
    """What someone with the database but not the master key can do: edit entry 7 and recompute every
    hash after it, so that the chain itself is consistent again. Returns the new hashes by seq."""
    entries = await trail.list(org)
    prev, forged_hashes = entries[5].hash, {}
    for entry in entries[6:]:
        forged = dataclasses.replace(
            entry, actor="key:forged" if entry.seq == 7 else entry.actor, prev_hash=prev
        )
        prev = forged_hashes[entry.seq] = entry_hash(forged.to_dict())
        await edit_entry(db, org, entry.seq, actor=forged.actor, prev_hash=forged.prev_hash, hash=prev)
    async with db.session() as s:
        await s.execute(update(AuditHead).where(AuditHead.org_id == org).values(hash=prev))
    return forged_hashes


async def test_a_rewritten_and_rehashed_stretch_is_caught_by_the_signed_checkpoint_after_it(
    db: Database, make_trail: TrailFactory
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    await _rewrite_from_seven(db, trail, org)
    [report] = (await trail.verify(org)).organisations
    assert report.problem is not None
    # Checkpoint 5 still matches, checkpoint 10 does not: the rewrite began in 6..10.
    assert (report.problem.seq, report.problem.reason) == (6, "edited"), report.problem
    assert "entries 6 to 10 were rewritten" in report.problem.message


async def test_a_checkpoint_rewritten_to_match_a_forged_chain_has_a_bad_signature(
    db: Database, make_trail: TrailFactory
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    forged = await _rewrite_from_seven(db, trail, org)
    async with db.session() as s:
        await s.execute(
            update(AuditCheckpoint)
            .where(AuditCheckpoint.org_id == org, AuditCheckpoint.seq == 10)
            .values(hash=forged[10])
        )
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (10, "bad_signature"), report.problem  # type: ignore[union-attr]


async def test_a_cut_tail_with_its_head_moved_back_is_a_bad_signature(
    db: Database, make_trail: TrailFactory
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    [entry11] = await trail.list(org, after_seq=10, limit=1)
    await delete_entry(db, org, 12)
    async with db.session() as s:
        await s.execute(update(AuditHead).where(AuditHead.org_id == org).values(seq=11, hash=entry11.hash))
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (11, "bad_signature")  # type: ignore[union-attr]


async def test_a_removed_head_is_found_and_stays_found_after_the_next_append(
    db: Database, make_trail: TrailFactory
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    async with db.session() as s:
        await s.execute(delete(AuditHead).where(AuditHead.org_id == org))
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (ENTRIES + 1, "head_missing")  # type: ignore[union-attr]
    # The next append goes on from the latest entry, but never signs a head again: signing would
    # bless whatever was done to the tail while the head was gone.
    await trail.record(event(org, 99))
    [after] = (await trail.verify(org)).organisations
    assert after.problem is not None and after.problem.reason == "head_missing", after


async def test_entries_appended_past_the_signed_head_are_unsigned(
    db: Database, make_trail: TrailFactory
) -> None:
    trail = make_trail(db)
    org = await _tampered_org(db, trail)
    [last] = await trail.list(org, after_seq=ENTRIES - 1)
    forged = dataclasses.replace(last, seq=ENTRIES + 1, prev_hash=last.hash, actor="key:forged")
    forged = dataclasses.replace(forged, hash=entry_hash(forged.to_dict()))
    async with db.session() as s:
        s.add(AuditEntryRow(**{**forged.to_dict(), "at": forged.at}))
    [report] = (await trail.verify(org)).organisations
    assert (report.problem.seq, report.problem.reason) == (ENTRIES + 1, "unsigned")  # type: ignore[union-attr]


async def test_signatures_under_another_master_key_id_break_the_chain_and_go_unchecked_without_a_key(
    db: Database, make_trail: TrailFactory, master_key: MasterKey
) -> None:
    """A rotation signs the trail again (``resign``), so a head or checkpoint under another key id is
    forged or left over: a break. Without any master key, nothing can be checked: notes, no break."""
    org = await _tampered_org(db, make_trail(db))
    [report] = (await make_trail(db, key=MasterKey.generate("rotated")).verify(org)).organisations
    assert report.problem is not None and report.problem.reason == "bad_signature"
    assert master_key.key_id in report.problem.message
    [unkeyed] = (await make_trail(db, key=None).verify(org)).organisations
    assert unkeyed.ok and len(unkeyed.not_checkable) == 2


async def test_verifying_every_organisation_names_the_broken_one(
    own_database_url: str, make_trail: TrailFactory
) -> None:
    db = Database(own_database_url)
    await db.migrate()
    try:
        trail = make_trail(db)
        intact, broken = await _tampered_org(db, trail), await _tampered_org(db, trail)
        await edit_entry(db, broken, 3, target="forged")
        report = await trail.verify()
        assert not report.ok
        by_org = {o.org_id: o for o in report.organisations}
        assert set(by_org) == {intact, broken}
        assert by_org[intact].ok and by_org[broken].problem.seq == 3  # type: ignore[union-attr]
    finally:
        await db.close()


def test_verify_entries_is_pure_over_exported_dicts(master_key: MasterKey) -> None:
    """The offline check needs no database: a chain of dicts built by hand verifies, and a gap is named."""
    from hatchway.audit.chain import Signer, genesis_hash

    org, prev, entries = "org_x", genesis_hash("org_x"), []
    for seq in range(1, 4):
        fields: dict[str, Any] = {
            "org_id": org,
            "seq": seq,
            "at": "2026-01-01T00:00:00.000000+00:00",
            "actor": "system",
            "action": "org.create",
            "target": org,
            "outcome": "success",
            "source": None,
            "request_id": None,
            "detail": {},
            "prev_hash": prev,
        }
        prev = fields["hash"] = entry_hash(fields)
        entries.append(fields)
    signer = Signer(master_key)
    head = {
        "org_id": org,
        "seq": 3,
        "hash": prev,
        "key_id": signer.key_id,
        "signature": signer.sign(org, 3, prev),
    }
    assert verify_entries(org, entries, head, key=master_key).ok
    broken = verify_entries(org, [entries[0], entries[2]], head, key=master_key)
    assert (broken.problem.seq, broken.problem.reason) == (2, "removed")  # type: ignore[union-attr]


async def test_each_entry_is_logged_as_one_structured_line(
    db: Database, master_key: MasterKey, caplog: pytest.LogCaptureFixture, log_secrets: Redactor
) -> None:
    org = new_org()
    with caplog.at_level(logging.INFO, logger="hatchway.audit"):
        entry = await AuditTrail(db, master_key, AuditSettings()).record(event(org, 1))
        await AuditTrail(db, master_key, AuditSettings(otel_logs=False)).record(event(org, 2))
    lines = [r for r in caplog.records if r.name == "hatchway.audit"]
    assert len(lines) == 1
    assert json.loads(lines[0].getMessage().removeprefix("audit ")) == entry.to_dict()
    assert getattr(lines[0], "audit.action") == "limit.set"


async def test_resigning_after_a_rotation_keeps_every_signature_checkable_but_not_a_broken_chain(
    db: Database, make_trail: TrailFactory
) -> None:
    old = make_trail(db)
    intact, broken = new_org(), new_org()
    await record_many(old, intact, ENTRIES)
    await record_many(old, broken, ENTRIES)
    await edit_entry(db, broken, 4, target="elsewhere")
    new_key = MasterKey.generate("rotated")
    done = await old.resign(new_key)  # every organisation of the database (others' tests' too)
    assert broken in done.refused and intact not in done.refused
    assert done.resigned >= 3  # the intact organisation's head and two checkpoints at least
    rotated = make_trail(db, key=new_key)
    [report] = (await rotated.verify(intact)).organisations
    assert report.ok and report.signatures_checked == 3 and report.not_checkable == ()
    [still] = (await rotated.verify(broken)).organisations
    assert still.problem is not None and still.problem.seq == 4
