"""A database of the test's own, for tests that touch every row (master key rotation)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import fresh_pg_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Like ``database_url``, but the PostgreSQL database is made for this test alone."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        return
    with fresh_pg_database("hatchway_v") as url:
        yield url
