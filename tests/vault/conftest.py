"""A database of the test's own, for tests that touch every row (master key rotation)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PG_URL


async def _admin(sql: str) -> None:
    import asyncpg

    assert PG_URL is not None
    conn = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Like ``database_url``, but the PostgreSQL database is made for this test alone."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        return
    if not PG_URL:
        pytest.skip("PostgreSQL not configured: set HATCHWAY_TEST_DATABASE_URL")
    name = f"hatchway_v_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    yield f"{PG_URL.rpartition('/')[0]}/{name}"
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
