"""The pin store and the pinning check on a real database (SQLite and PostgreSQL): what a hostile
organisation can make the store hold is bounded, and what is stored has the run's secrets redacted."""

from __future__ import annotations

import uuid

import mcp_types as types
import pytest

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.engine.run_log import ListToolsStep, ToolDriftStep
from hatchway.engine.tools.mcp.pinning import ToolPinning
from hatchway.principal import Principal
from hatchway.redaction import Redactor
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.store.tool_pins import ToolPins

pytestmark = pytest.mark.anyio
SECRET = "sk-live-4f9a2c7d1e8b6a3f5c0d9e2b"


def _tool(name: str, description: str = "Does a thing.") -> types.Tool:
    return types.Tool(name=name, description=description, inputSchema={"type": "object"})


def _server(server_id: str) -> McpServerConfig:
    return McpServerConfig.model_validate({"id": server_id, "url": f"https://{server_id}.example/mcp"})


async def _setup(database_url: str, **pins_options: int) -> tuple[Database, ToolPins, RunContext]:
    db = Database(database_url)
    await db.migrate()
    # A fresh name: id(db) repeats once an earlier test's Database is collected, on one shared PostgreSQL.
    org = await OrgStore(db).create_org(f"pins-{uuid.uuid4().hex[:12]}")
    ctx = RunContext.from_headers(
        Principal(org.id, org.name), {}, deadline_seconds=5, known_secrets=Redactor([SECRET])
    )
    return db, ToolPins(db, **pins_options), ctx


async def test_an_organisation_at_its_pin_cap_gets_new_servers_tools_withheld(database_url: str) -> None:
    db, pins, ctx = await _setup(database_url, max_per_org=3)
    pinning = ToolPinning(pins)
    try:
        first = await pinning.admitted(_server("a"), [_tool("x"), _tool("y")], ctx, trusted=False)
        assert [t.name for t in first] == ["x", "y"]  # pinned on first sight
        # Two more tools would pass the cap: not pinned, and withheld under block (inline plugins)…
        assert await pinning.admitted(_server("b"), [_tool("p"), _tool("q")], ctx, trusted=False) == []
        assert {(d.server, d.tool, d.change) for d in ctx.run.reported(ToolDriftStep)} == {
            ("b", "p", "unpinned"),
            ("b", "q", "unpinned"),
        }
        assert "max_tool_pins_per_organisation" in (ctx.run.reported(ListToolsStep)[0].error or "")
        # …kept under warn; either way the store holds no more than the cap.
        kept = await pinning.admitted(_server("c"), [_tool("p"), _tool("q")], ctx, trusted=True)
        assert len(kept) == 2
        assert len(await pins.pins(ctx.org_id)) == 2
    finally:
        await db.close()


async def test_a_secret_echoed_in_a_description_is_stored_redacted(database_url: str) -> None:
    db, pins, ctx = await _setup(database_url)
    pinning = ToolPinning(pins)
    try:
        await pinning.admitted(_server("s"), [_tool("echo")], ctx, trusted=False)
        poisoned = _tool("echo", f"Echo. Your key is {SECRET}.")
        assert await pinning.admitted(_server("s"), [poisoned], ctx, trusted=False) == []
        [waiting] = await pins.waiting(ctx.org_id)
        assert SECRET not in str(waiting) and "[REDACTED]" in waiting["seen"]["description"]
        assert waiting["seen"]["server_url"] == "https://s.example/mcp"
        # Approving it lets the same (unredacted) definition through: the hash is of what was said.
        assert await pins.approve(ctx.org_id, "s") == ["echo"]
        assert await pinning.admitted(_server("s"), [poisoned], ctx, trusted=False) == [poisoned]
    finally:
        await db.close()
