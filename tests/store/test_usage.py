"""The usage aggregate on SQLite and (when configured) PostgreSQL: sums per group, unpriced records,
the time range, the order (costliest first, no-group last) and the limit, one organisation only."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from hatchway.ids import new_id
from hatchway.store.db import Database
from hatchway.store.logs import LogRecord, LogWriter
from hatchway.store.usage import UsageQuery, UsageStore

pytestmark = pytest.mark.anyio

START = datetime(2026, 11, 1, tzinfo=UTC)


def record(org_id: str, day: int, cost: float | None, **kw: object) -> LogRecord:
    prompt, completion = int(kw.pop("prompt", 10)), int(kw.pop("completion", 5))
    return LogRecord(
        id=new_id("log"),
        org_id=org_id,
        route="chat.completions",
        status="ok",
        http_status=200,
        latency_ms=1.0,
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        cost_usd=cost,
        created_at=START + timedelta(days=day),
        **kw,  # type: ignore[arg-type]
    )


async def test_groups_sum_their_records_costliest_first(db: Database) -> None:
    org, other = f"org_{uuid.uuid4().hex[:12]}", f"org_{uuid.uuid4().hex[:12]}"
    writer = LogWriter(db)
    for r in (
        record(org, 0, 0.25, model="gpt-4o", key_id="key_a", key_name="ci", on_behalf_of="ana"),
        record(org, 1, 0.5, model="gpt-4o", key_id="key_a", key_name="ci", on_behalf_of="ana", prompt=100),
        record(org, 2, None, model="llama", key_id="key_b", key_name="batch"),
        record(org, 3, 0.125, model="agent:lead", agent="lead", key_id="key_b", key_name="batch"),
        record(org, 9, 2.0, model="gpt-4o", key_id="key_a", key_name="ci"),
        record(other, 1, 100.0, model="gpt-4o", key_id="key_x", key_name="theirs"),
    ):
        writer.submit(r)
    await writer.flush()
    store = UsageStore(db)

    week = UsageQuery(group_by="model", since=START, until=START + timedelta(days=7))
    report = await store.summarise(org, week)
    assert [(g.group, g.requests, g.cost_usd, g.unpriced_requests) for g in report.groups] == [
        ("gpt-4o", 2, 0.75, 0),
        ("agent:lead", 1, 0.125, 0),
        ("llama", 1, 0.0, 1),
    ]
    assert report.groups[0].prompt_tokens == 110 and report.groups[0].total_tokens == 120
    totals = report.totals
    assert (totals.requests, totals.cost_usd, totals.unpriced_requests, totals.total_tokens) == (
        4,
        0.875,
        1,
        150,
    )

    users = await store.summarise(org, UsageQuery(group_by="user"))
    assert [(g.group, g.requests) for g in users.groups] == [(None, 3), ("ana", 2)]  # 2.125 vs 0.75
    agents = await store.summarise(org, UsageQuery(group_by="agent", until=START + timedelta(days=7)))
    assert [(g.group, g.cost_usd) for g in agents.groups] == [(None, 0.75), ("lead", 0.125)]
    keys = await store.summarise(org, UsageQuery(group_by="key"))
    assert [(g.group, g.key_name, g.cost_usd) for g in keys.groups] == [
        ("key_a", "ci", 2.75),
        ("key_b", "batch", 0.125),
    ]

    first = await store.summarise(org, UsageQuery(group_by="model", limit=1))
    assert [g.group for g in first.groups] == ["gpt-4o"] and first.has_more
    assert first.totals.requests == 5  # the totals cover the groups left out
    empty = await store.summarise(org, UsageQuery(since=START + timedelta(days=30)))
    assert empty.groups == [] and empty.totals.requests == 0 and empty.totals.cost_usd == 0.0


async def test_a_tie_puts_the_records_without_a_group_last(db: Database) -> None:
    org = f"org_{uuid.uuid4().hex[:12]}"
    writer = LogWriter(db)
    writer.submit(record(org, 0, 0.5))
    writer.submit(record(org, 0, 0.5, on_behalf_of="zoe"))
    await writer.flush()
    users = await UsageStore(db).summarise(org, UsageQuery(group_by="user"))
    assert [g.group for g in users.groups] == ["zoe", None]
