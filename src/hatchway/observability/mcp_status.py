"""The MCP servers of hatchway.yaml's plugins as an organisation sees them: reachable, tools, last error.

A report names each server by where it is configured (``rule:<name>`` or ``agent:<name>``), probes
it with the organisation's own credentials (a fresh ``tools/list`` through the shared pool) and
finds the last failed call to it in the organisation's request log. It never includes auth
material: the auth *type* only, URLs without user info or query string, stdio commands without
their arguments.
"""

from __future__ import annotations

import asyncio
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import select

from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.config.plugins import ConfiguredPlugins, ConfiguredServer
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.credentials import requester_of
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import HatchwayError
from hatchway.principal import Principal
from hatchway.store.db import Database
from hatchway.store.tables import RequestLog

PROBE_SECONDS = 5.0
_RECENT_RECORDS = 300


def public_location(server: McpServerConfig) -> str:
    """Where the server is, with nothing that could be a credential."""
    if server.url:
        parts = urlsplit(server.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return PurePath(server.command or "").name


class McpServerReport:
    """Builds ``GET /v1/mcp/servers`` for one organisation."""

    def __init__(
        self, plugins: ConfiguredPlugins, pool: McpServerPool, credentials: Any, db: Database
    ) -> None:
        self.servers = plugins.servers()
        self.pool = pool
        self.credentials = credentials
        self.db = db

    async def report(self, principal: Principal, *, probe: bool = True) -> list[dict[str, Any]]:
        last_errors = await self._last_errors(principal.org_id)
        probes = await asyncio.gather(*(self._probe(c, principal, probe) for c in self.servers))
        return [
            {**describe(c), **found, "last_error": last_errors.get((c.source, c.server.id))}
            for c, found in zip(self.servers, probes, strict=True)
        ]

    async def _probe(self, configured: ConfiguredServer, principal: Principal, probe: bool) -> dict[str, Any]:
        server = configured.server
        listing = self.pool.listing(server, principal.org_id, trusted=True)
        if not probe:
            cached = await listing.fresh()
            return {"reachable": None, "tools": _names(cached) if cached is not None else None, "error": None}
        from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient  # the MCP SDK: see pool.py

        ctx = RunContext.from_headers(principal, {}, deadline_seconds=PROBE_SECONDS)
        client = PluginMcpClient(
            PluginConfig(version="1", mcp_servers=[server]),
            trusted=True,
            pool=self.pool,
            credentials=self.credentials,
        )
        await listing.forget()  # a probe asks the server itself, not the shared listing
        try:
            await self.credentials.authorize(server, requester_of(ctx), trusted=True)
            tools = await client.list_tools(server, ctx)
        except HatchwayError as exc:
            return {"reachable": False, "tools": None, "error": ctx.redact(exc.message)}
        return {"reachable": True, "tools": _names(tools), "error": None}

    async def _last_errors(self, org_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The newest failed call per (source, server) among the organisation's recent runs."""
        stmt = (
            select(RequestLog.id, RequestLog.created_at, RequestLog.plugin_source, RequestLog.steps)
            .where(RequestLog.org_id == org_id, RequestLog.plugin_source.is_not(None))
            .order_by(RequestLog.id.desc())
            .limit(_RECENT_RECORDS)
        )
        found: dict[tuple[str, str], dict[str, Any]] = {}
        async with self.db.session() as s:
            rows = (await s.execute(stmt)).all()
        for log_id, created_at, source, steps in rows:
            for step in reversed(steps or []):
                key = (source or "", str(step.get("server") or ""))
                kind = step.get("type")
                if kind not in ("tool_call", "list_tools") or step.get("outcome") == "ok" or key in found:
                    continue
                found[key] = {
                    "at": int(created_at.timestamp()),
                    "log_id": log_id,
                    "step": kind,
                    "tool": step.get("tool"),
                    "outcome": step.get("outcome"),
                    "message": str(step.get("error") or step.get("result_preview") or "")[:300],
                }
        return found


def describe(configured: ConfiguredServer) -> dict[str, Any]:
    server = configured.server
    return {
        "id": server.id,
        "source": configured.source,
        "transport": server.kind,
        "location": public_location(server),
        "auth_type": server.auth.type,
        "allowed_tools": server.tools,
        "timeout_ms": server.timeout_ms,
        "max_retries": server.max_retries,
    }


def _names(tools: list[Any]) -> list[str]:
    return sorted(t.name for t in tools)
