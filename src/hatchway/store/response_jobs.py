"""What a worker needs to run a queued background response, kept beside the response row.

The queue carries ids only. The request itself is in the database: its input items and chain are
the response's own rows; this table adds the parameters that are not echoed on the Response object,
who asked (key id and name, never the key), and the request headers the run reads (an inline
plugin, forwarded headers), sealed with the organisation's vault key because forwarded headers may
carry end-user credentials. The row goes away with its response.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.errors import NotFound
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow


class ResponseJobRecord(Base):
    """The stored request of one queued background response."""

    __tablename__ = "response_jobs"

    response_id: Mapped[str] = mapped_column(ForeignKey("responses.id", ondelete="CASCADE"), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The create request's parameters without ``input`` (stored as the response's input items)."""
    key_id: Mapped[str | None] = mapped_column(String(40), default=None)
    key_name: Mapped[str | None] = mapped_column(String(128), default=None)
    sealed_headers: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


@dataclass(frozen=True, slots=True)
class ResponseJob:
    """A queued response's request, as a worker reads it."""

    response_id: str
    body: dict[str, Any]
    key_id: str | None
    key_name: str | None
    sealed_headers: bytes | None


class ResponseJobStore:
    """Reads the stored requests of queued responses (they are written with the response itself)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, response_id: str) -> ResponseJob:
        async with self.db.session() as s:
            row = await s.get(ResponseJobRecord, response_id)
        if row is None:
            raise NotFound(f"No stored request for the queued response '{response_id}'.")
        return ResponseJob(row.response_id, row.body, row.key_id, row.key_name, row.sealed_headers)
