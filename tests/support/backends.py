"""The PostgreSQL and Redis a test run is given: ``HATCHWAY_TEST_DATABASE_URL`` and
``HATCHWAY_TEST_REDIS_URL`` (empty when unset; the tests that need them skip and say why)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PG_URL = os.environ.get("HATCHWAY_TEST_DATABASE_URL") or ""
REDIS_URL = os.environ.get("HATCHWAY_TEST_REDIS_URL") or ""
NEEDS_PG_AND_REDIS = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.skipif(
        not (PG_URL and REDIS_URL),
        reason="needs PostgreSQL and Redis: set HATCHWAY_TEST_DATABASE_URL and HATCHWAY_TEST_REDIS_URL",
    ),
]
"""The ``pytestmark`` of a module whose tests run replicas on the real PostgreSQL and Redis."""


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_URL.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def fresh_pg_database(prefix: str) -> Iterator[str]:
    """The URL of a new, empty database ``<prefix>_<random>`` on ``PG_URL``'s server, dropped on exit."""
    if not PG_URL:
        pytest.skip("PostgreSQL not configured: set HATCHWAY_TEST_DATABASE_URL")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG_URL.rpartition('/')[0]}/{name}"
    finally:  # a failing test inside must not leave its database behind
        asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
