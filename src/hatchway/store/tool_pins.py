"""Tool-definition pins: the approved definition of each upstream MCP tool, per organisation and
server, and what the server says now when that differs (docs/security.md, "Tool-definition pinning").

A pin is one row per (organisation, server id, tool): the hash and the definition last approved, and
the hash and the definition last seen. They differ while a drift waits for ``hatchway tools
approve``; ``approved_hash`` is None for a tool a server added under strict pinning. The rows are in
the store, so every replica withholds and restores the same tools.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from sqlalchemy import String, func, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow

Verdict = Literal["approved", "drifted", "new", "unpinned"]
"""``unpinned``: not pinned, the organisation being at ``max_tool_pins_per_organisation``."""


class ToolPin(Base):
    __tablename__ = "tool_pins"

    org_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    server: Mapped[str] = mapped_column(String(128), primary_key=True)
    """The server's id in its plugin (a definition holds its URL too: a server that moves drifts)."""
    tool: Mapped[str] = mapped_column(String(256), primary_key=True)
    approved_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    approved: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)
    seen_hash: Mapped[str] = mapped_column(String(64))
    seen: Mapped[dict[str, Any]] = mapped_column()
    approved_at: Mapped[datetime | None] = mapped_column(nullable=True)
    seen_at: Mapped[datetime] = mapped_column(default=utcnow)

    @property
    def verdict(self) -> Verdict:
        if self.approved_hash is None:
            return "new"
        return "approved" if self.approved_hash == self.seen_hash else "drifted"


def definition_hash(definition: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(definition, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True, slots=True)
class Seen:
    tool: str
    definition: dict[str, Any]
    hash: str


class ToolPins:
    def __init__(self, db: Database, *, max_per_org: int = 10_000) -> None:
        self.db = db
        self.max_per_org = max_per_org

    async def check(
        self, org_id: str, server: str, seen: list[Seen], *, add_approved: bool
    ) -> dict[str, Verdict]:
        """Each listed tool's verdict against its pin, recording what was seen.

        A server seen for the first time is pinned as it is (trust on first use: its first listing
        is the approved one). A tool it adds later is pinned approved when ``add_approved`` (``warn``),
        else held as ``new`` until approved (``block``). Concurrent first listings on several
        replicas insert once (``ON CONFLICT DO NOTHING``) and read back what won.
        """
        async with self.db.session() as s:
            rows = {
                row.tool: row
                for row in await s.scalars(
                    select(ToolPin).where(ToolPin.org_id == org_id, ToolPin.server == server)
                )
            }
            first = not rows
            missing = [item for item in seen if item.tool not in rows]
            refused: set[str] = set()
            if missing:
                count = select(func.count()).select_from(ToolPin).where(ToolPin.org_id == org_id)
                if (await s.scalar(count) or 0) + len(missing) > self.max_per_org:  # endless server ids
                    refused = {item.tool for item in missing}
                    seen = [item for item in seen if item.tool not in refused]
                    missing = []
            if missing:
                now = utcnow()
                values = []
                for item in missing:
                    approve = first or add_approved
                    values.append(
                        {
                            "org_id": org_id,
                            "server": server,
                            "tool": item.tool,
                            "approved_hash": item.hash if approve else None,
                            "approved": item.definition if approve else None,
                            "seen_hash": item.hash,
                            "seen": item.definition,
                            "approved_at": now if approve else None,
                            "seen_at": now,
                        }
                    )
                await s.execute(self.db.insert(ToolPin).values(values).on_conflict_do_nothing())
                names = [item.tool for item in missing]
                inserted = await s.scalars(
                    select(ToolPin).where(
                        ToolPin.org_id == org_id, ToolPin.server == server, ToolPin.tool.in_(names)
                    )
                )
                rows.update({row.tool: row for row in inserted})
            verdicts: dict[str, Verdict] = dict.fromkeys(refused, "unpinned")
            for item in seen:
                row = rows[item.tool]
                if row.seen_hash != item.hash:  # what the server says now, for `hatchway tools diff`
                    row.seen_hash, row.seen, row.seen_at = item.hash, item.definition, utcnow()
                verdicts[item.tool] = "approved" if row.approved_hash == item.hash else row.verdict
            return verdicts

    async def pins(
        self, org_id: str, server: str | None = None, *, pending: bool = False, limit: int = 1000
    ) -> list[ToolPin]:
        """The organisation's pins (one server's), or only those waiting for approval; ``limit`` at most."""
        query = select(ToolPin).where(ToolPin.org_id == org_id)
        if server is not None:
            query = query.where(ToolPin.server == server)
        if pending:
            query = query.where(
                or_(ToolPin.approved_hash.is_(None), ToolPin.approved_hash != ToolPin.seen_hash)
            )
        async with self.db.session() as s:
            return list(await s.scalars(query.order_by(ToolPin.server, ToolPin.tool).limit(limit)))

    async def waiting(self, org_id: str, server: str | None = None) -> list[dict[str, Any]]:
        """What ``hatchway tools diff --json`` and ``GET /v1/tools/drift`` show: each waiting tool."""
        return [
            {
                "server": pin.server,
                "tool": pin.tool,
                "change": pin.verdict,
                "approved": pin.approved,
                "seen": pin.seen,
                "seen_at": pin.seen_at.isoformat(),
                "diff": definition_diff(pin),
            }
            for pin in await self.pins(org_id, server, pending=True)
        ]

    async def approve(self, org_id: str, server: str, tools: list[str] | None = None) -> list[str]:
        """Approve what the server says now for ``tools`` (None: each waiting tool); the tools approved."""
        waiting = [
            row for row in await self.pins(org_id, server, pending=True) if tools is None or row.tool in tools
        ]
        async with self.db.session() as s:
            for row in waiting:
                await s.execute(
                    update(ToolPin)
                    .where(
                        ToolPin.org_id == org_id,
                        ToolPin.server == server,
                        ToolPin.tool == row.tool,
                        ToolPin.seen_hash == row.seen_hash,  # not a definition seen since the diff
                    )
                    .values(approved_hash=row.seen_hash, approved=row.seen, approved_at=utcnow())
                )
        return [row.tool for row in waiting]


def definition_diff(pin: ToolPin) -> str:
    """The unified diff from the approved definition to the one seen (all of it for a new tool)."""

    def lines(definition: dict[str, Any] | None) -> list[str]:
        if definition is None:
            return []
        return (
            orjson.dumps(definition, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()
        )

    label = f"{pin.server}/{pin.tool}"
    return "\n".join(
        difflib.unified_diff(
            lines(pin.approved), lines(pin.seen), f"approved {label}", f"seen {label}", lineterm=""
        )
    )
