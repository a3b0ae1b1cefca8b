"""Exports verified offline: intact files pass; an altered, reordered or cut file fails; secrets never
appear in one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hatchway.audit import AuditEvent, AuditTrail, verify_export
from hatchway.errors import InternalError
from hatchway.store.db import Database
from hatchway.vault import Vault
from hatchway.vault.master_key import MasterKey
from tests.audit.conftest import TrailFactory, event, new_org, record_many

pytestmark = pytest.mark.anyio


async def _export_lines(
    trail: AuditTrail, org_id: str | None = None, since: datetime | None = None
) -> list[str]:
    return [json.dumps(record) + "\n" async for record in trail.export(org_id, since)]


def _problem(lines: list[str], key: MasterKey | None, org_id: str | None = None) -> tuple[int, str] | None:
    report = verify_export(lines, key, org_id)
    broken = [o.problem for o in report.organisations if o.problem is not None]
    return (broken[0].seq, broken[0].reason) if broken else None


def _entry_line(lines: list[str], seq: int) -> int:
    return next(
        i for i, line in enumerate(lines) if '"type": "entry"' in line and json.loads(line)["seq"] == seq
    )


async def test_an_export_verifies_offline_and_any_altered_line_fails(
    db: Database, make_trail: TrailFactory, master_key: MasterKey
) -> None:
    trail = make_trail(db)
    org, other = new_org(), new_org()
    await record_many(trail, org, 12)
    await record_many(trail, other, 3)
    lines = await _export_lines(trail)
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds[0] == "export" and kinds.count("head") >= 2 and kinds.count("checkpoint") >= 2
    mine = await _export_lines(trail, org)
    report = verify_export(mine, master_key)
    assert report.ok and [(o.org_id, o.entries, o.signatures_checked) for o in report.organisations] == [
        (org, 12, 3)
    ]
    assert verify_export(lines, master_key, org).ok and verify_export(lines, master_key, other).ok

    for field, value in [
        ("actor", "key:forged"),
        ("detail", {"n": 99}),
        ("at", "2020-01-01T00:00:00.000000+00:00"),
    ]:
        altered = list(mine)
        record = json.loads(altered[_entry_line(mine, 7)])
        altered[_entry_line(mine, 7)] = json.dumps(record | {field: value}) + "\n"
        assert _problem(altered, master_key) == (7, "edited"), field
    swapped = list(mine)
    i, j = _entry_line(mine, 4), _entry_line(mine, 5)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    assert _problem(swapped, master_key) == (4, "reordered")
    assert _problem([*mine[: _entry_line(mine, 6)], *mine[_entry_line(mine, 7) :]], master_key) == (
        6,
        "removed",
    )
    assert _problem([*mine[:3], "not json\n", *mine[3:]], master_key) == (0, "edited")
    assert _problem(mine[1:], master_key) == (0, "edited")  # no header: not an export
    assert _problem(mine[:1], master_key) == (1, "removed")  # the organisation's records all gone


async def test_a_cut_export_is_caught_by_its_signed_head(
    db: Database, make_trail: TrailFactory, master_key: MasterKey
) -> None:
    trail = make_trail(db)
    org = new_org()
    await record_many(trail, org, 12)
    lines = await _export_lines(trail, org)
    cut = lines[: _entry_line(lines, 11)]  # entries 11 and 12 gone
    assert _problem(cut, master_key) == (11, "truncated")
    without_head = [line for line in cut if '"type": "head"' not in line]
    assert _problem(without_head, master_key) == (11, "head_missing")
    head_moved = [
        json.dumps(json.loads(line) | {"seq": 10}) + "\n" if '"type": "head"' in line else line
        for line in cut
    ]
    assert _problem(head_moved, master_key) == (10, "bad_signature")
    # Without the master key the head's claim still catches a cut that left it in place.
    assert _problem(cut, None) == (11, "truncated")
    assert verify_export(lines, None).ok


async def test_an_export_since_a_time_starts_at_a_signed_checkpoint_and_verifies_alone(
    db: Database, make_trail: TrailFactory, master_key: MasterKey
) -> None:
    start = datetime(2026, 2, 1, tzinfo=UTC)
    times = iter(start + timedelta(hours=n) for n in range(20))
    trail = make_trail(db, clock=lambda: next(times))
    org = new_org()
    await record_many(trail, org, 12)
    lines = await _export_lines(trail, org, since=start + timedelta(hours=7))  # entry 8 on
    entries = [json.loads(line)["seq"] for line in lines if '"type": "entry"' in line]
    assert entries == [6, 7, 8, 9, 10, 11, 12]  # from just after checkpoint 5
    assert verify_export(lines, master_key).ok
    header = json.loads(lines[0])
    as_full = [json.dumps(header | {"since": None}) + "\n", *lines[1:]]
    assert _problem(as_full, master_key) == (1, "removed")  # a full export must start at 1
    later = await _export_lines(trail, org, since=start + timedelta(days=1))
    assert [json.loads(line)["type"] for line in later] == ["export"]  # nothing that recent


async def test_a_secret_put_records_the_name_never_the_value(
    db: Database, make_trail: TrailFactory, master_key: MasterKey
) -> None:
    from hatchway.store.orgs import OrgStore

    org = await OrgStore(db).create_org(new_org())
    value = "sk-live-0123456789abcdef"
    await Vault(db, master_key).put(org.id, "openai_key", value, ["api.openai.com"])
    trail = make_trail(db)
    await trail.record(
        AuditEvent(
            org_id=org.id,
            actor="key:key_admin",
            action="secret.put",
            target="openai_key",
            detail={"allowed_hosts": ["api.openai.com"], "created": True},
        )
    )
    exported = "".join(await _export_lines(trail, org.id))
    assert "openai_key" in exported and value not in exported

    refused: list[dict[str, Any]] = [
        {"value": value},
        {"new": {"api_key": value}},
        {"hosts": [{"accessToken": value}]},
        {"client_secret": value},
        {"Password": value},
    ]
    for detail in refused:
        with pytest.raises(InternalError, match="looks like a secret"):
            await trail.record(event(org.id, 1, action="secret.put", detail=detail))
    assert [e.seq for e in await trail.list(org.id)] == [1]  # nothing refused was written
    await trail.record(event(org.id, 2, detail={"tokens_per_minute": 5, "key_id": "key_1", "name": "x"}))
