"""What one push sweep costs (``PushConfigs.untold``, run by every replica every
``a2a.push_sweep_seconds``) once many configs have been told: configs are never deleted when their
task ends (no retention), so the sweep's query must not read every config ever registered. Real
PostgreSQL: the rows the query's plan reads from ``a2a_push_configs``, by ``EXPLAIN ANALYZE``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event, text

from hatchway.a2a.push_configs import PushConfigs
from hatchway.store.db import Database
from tests.support.backends import NEEDS_PG_AND_REDIS

pytestmark = [*NEEDS_PG_AND_REDIS, pytest.mark.anyio]
TOLD = 20_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _scanned(plan: dict[str, Any], table: str) -> int:
    """Rows the plan read from ``table`` (kept plus removed by its filter), over all its nodes."""
    here = 0
    if plan.get("Relation Name") == table:
        loops = plan.get("Actual Loops", 1)
        here = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    return here + sum(_scanned(child, table) for child in plan.get("Plans", []))


async def test_the_sweep_does_not_read_every_config_ever_told(pg_database_url: str) -> None:
    db = Database(pg_database_url)
    try:
        await db.migrate()
        async with db.session() as s:
            for statement in (
                "INSERT INTO responses (id, org_id, status, model, request, depth, background, created_at, "
                "updated_at) SELECT 'resp_' || i, 'org_cost', 'completed', 'agent:helper', '{}', 0, true, "
                "now(), now() FROM generate_series(1, :n) i",
                "INSERT INTO a2a_tasks (id, org_id, agent, context_id, response_id, created_at, updated_at) "
                "SELECT 'task_' || i, 'org_cost', 'helper', 'ctx_' || i, 'resp_' || i, now(), now() "
                "FROM generate_series(1, :n) i",
                "INSERT INTO a2a_push_configs (task_id, id, org_id, url, sealed, notified, delivered, "
                "created_at) SELECT 'task_' || i, 'c', 'org_cost', 'https://example.com/hook', '\\x00', "
                "'resp_' || i || '|TASK_STATE_COMPLETED', 'resp_' || i || '|TASK_STATE_COMPLETED', "
                "now() - interval '1 day' FROM generate_series(1, :n) i",
                # one owed: its task ended, it was never told
                "UPDATE a2a_push_configs SET notified = NULL, delivered = NULL WHERE task_id = 'task_1'",
                "ANALYZE",
            ):
                await s.execute(text(statement), {"n": TOLD} if ":n" in statement else {})

        captured: list[tuple[str, Any]] = []

        def capture(
            conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
        ) -> None:
            if "a2a_push_configs" in statement:
                captured.append((statement, parameters))

        event.listen(db.engine.sync_engine, "before_cursor_execute", capture)
        owed = await PushConfigs(db, vault=None).untold(32)  # type: ignore[arg-type]
        event.remove(db.engine.sync_engine, "before_cursor_execute", capture)
        assert [row.task_id for row, _ in owed] == ["task_1"]

        statement, parameters = captured[-1]
        async with db.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            plan = await driver.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", *parameters)
        tree = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
        scanned = _scanned(tree, "a2a_push_configs")
        assert scanned < 1_000, f"one sweep read {scanned} config rows of {TOLD + 1} to find 1 owed:\n{plan}"
    finally:
        await db.close()
