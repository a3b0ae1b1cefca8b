"""Limits set with ``hatchway limits set``: kept in the store, so every replica reads the same, and
laid over hatchway.yaml's ``limits:`` key by key (docs/limits.md, "Setting limits").

Only the operator sets them (the CLI opens the database); no HTTP route writes them, so no
organisation's key can change its own limits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import String, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.config.settings import LimitsSettings, LimitValues
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

Table = Literal["defaults", "organisations", "keys", "users", "agents"]
TABLES: tuple[Table, ...] = get_args(Table)
LIMIT_KEYS: tuple[str, ...] = tuple(LimitValues.model_fields)


class LimitOverride(Base):
    """One scope's limits as ``hatchway limits set`` left them (only the keys it set)."""

    __tablename__ = "limit_overrides"

    table: Mapped[str] = mapped_column(String(16), primary_key=True)
    """``defaults``, ``organisations``, ``keys``, ``users`` or ``agents``, as in ``limits:``."""
    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    """The organisation, key, end user or agent (``"*"``: each without its own; ``""`` for defaults)."""
    values: Mapped[dict[str, Any]] = mapped_column()
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class LimitOverrides:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def all(self) -> list[LimitOverride]:
        async with self.db.session() as s:
            return list(
                await s.scalars(select(LimitOverride).order_by(LimitOverride.table, LimitOverride.name))
            )

    async def set(self, table: Table, name: str, values: dict[str, Any], unset: list[str]) -> dict[str, Any]:
        """Set ``values`` and drop ``unset`` of one scope's entry; what it holds after (``{}``: gone).

        ``values`` are checked as hatchway.yaml's are (``LimitValues``: a ValidationError names the key).
        """
        name = "" if table == "defaults" else name
        async with self.db.session() as s:
            row = await s.get(LimitOverride, (table, name))
            merged = {**(row.values if row is not None else {}), **values}
            for key in unset:
                merged.pop(key, None)
            merged = LimitValues.model_validate(merged).model_dump(exclude_none=True)
            if not merged:
                await s.execute(
                    delete(LimitOverride).where(LimitOverride.table == table, LimitOverride.name == name)
                )
            elif row is None:
                s.add(LimitOverride(table=table, name=name, values=merged))
            else:
                row.values = merged
        return merged


def overlaid(settings: LimitsSettings, overrides: list[LimitOverride]) -> LimitsSettings:
    """hatchway.yaml's limits with the store's laid over them, key by key."""
    if not overrides:
        return settings
    data = settings.model_dump(exclude_none=True)
    for row in overrides:
        if row.table not in TABLES:
            continue
        if row.table == "defaults":
            data["defaults"] = {**data["defaults"], **row.values}
        else:
            entries = data[row.table]
            entries[row.name] = {**entries.get(row.name, {}), **row.values}
    return LimitsSettings.model_validate(data)
