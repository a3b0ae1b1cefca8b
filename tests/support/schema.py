"""Whether a table's model matches what the migrations make of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from hatchway.store.db import Database
from hatchway.store.tables import Base


def migration_differences(
    tmp_path: Path, table: str, *, ddl_indexes: frozenset[str] = frozenset()
) -> list[object]:
    """Alembic's differences between ``Base.metadata`` and a fresh SQLite database migrated to the
    heads, for ``table`` only (its model module must be imported by the caller). ``ddl_indexes``:
    partial indexes the model makes with an ``after_create`` DDL, which Alembic does not see."""
    path = tmp_path / "migrated.db"

    async def migrate() -> None:
        db = Database(f"sqlite+aiosqlite:///{path}")
        await db.migrate()
        await db.close()

    asyncio.run(migrate())
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    return [
        d
        for d in differences
        if table in repr(d)
        and not (isinstance(d, tuple) and d[0] == "remove_index" and d[1].name in ddl_indexes)
    ]
