"""Request-log retention: a periodic task on every gateway purges records past ``log_retention_days``."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from hatchway.ids import new_id
from hatchway.observability.retention import purge_request_logs
from hatchway.store.db import Database
from hatchway.store.logs import LogQuery, RequestLogStore
from hatchway.store.tables import RequestLog, utcnow
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import wait_until


def record(org_id: str, age: timedelta) -> RequestLog:
    return RequestLog(
        id=new_id("log"),
        org_id=org_id,
        route="chat.completions",
        model="gpt-4o",
        status="ok",
        http_status=200,
        latency_ms=1.0,
        steps=[],
        created_at=utcnow() - age,
    )


async def _insert(db: Database, rows: list[RequestLog]) -> None:
    async with db.session() as s:
        s.add_all(rows)


def test_the_gateway_purges_old_records_by_itself(gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(log_retention_days=7, log_purge_interval_seconds=0.2)
    assert gateway.org is not None
    llm.reply("fresh")
    gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    old = [record(gateway.org.org_id, timedelta(days=8)) for _ in range(3)]
    week_old = record(gateway.org.org_id, timedelta(days=6, hours=23))
    gw = gateway.gateway
    gateway.server.call(_insert(gw.db, [*old, week_old]))  # inserted after the first purge ran

    async def remaining() -> set[str]:
        await gw.log_writer.flush()  # the request's own record is written off its path, in a batch
        return {r.id for r in await gw.logs.list(gateway.org.org_id, LogQuery(limit=100))}

    kept = wait_until(
        lambda: (ids := gateway.server.call(remaining())) and not ids & {r.id for r in old} and ids,
        timeout=10,
        message="the periodic purge to remove the 8-day-old records",
    )
    assert week_old.id in kept and len(kept) == 2  # the 6-day-old one and the real request's


def test_replicas_purging_at_once_remove_everything_once(database_url: str) -> None:
    async def scenario() -> None:
        first, second = Database(database_url), Database(database_url)
        await first.migrate()
        try:
            org = f"org_{new_id('x')[-8:]}"
            await _insert(first, [record(org, timedelta(days=40)) for _ in range(25)])
            await _insert(first, [record(org, timedelta(days=1))])
            cutoff = utcnow() - timedelta(days=30)

            removed = await asyncio.gather(
                purge_request_logs(first, cutoff, batch_size=4),
                purge_request_logs(second, cutoff, batch_size=4),
            )

            assert sum(removed) >= 25  # a row both replicas saw is counted by each, deleted once
            left = await RequestLogStore(first).list(org, LogQuery(limit=100))
            assert len(left) == 1 and left[0].created_at > cutoff
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())
