"""The audit tables as migration 0014 creates them are the tables ``audit/store.py`` declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

import hatchway.audit.store  # noqa: F401  (its tables in Base.metadata)
from hatchway.store.db import Database
from hatchway.store.tables import Base

pytestmark = pytest.mark.anyio


def _audit_only(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    table = name if type_ == "table" else getattr(getattr(obj, "table", None), "name", None)
    return bool(table and table.startswith("audit_"))


async def test_the_migration_creates_the_audit_tables_as_declared(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'migrated.db'}")
    await db.migrate()
    await db.close()
    engine = create_engine(f"sqlite:///{tmp_path / 'migrated.db'}")
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_object": _audit_only, "compare_type": True}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()
