"""The MCP client pool: one live session per (organisation, server), reused across requests."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import TYPE_CHECKING

import orjson

from hatchway.config.plugin import McpServerConfig
from hatchway.observability.log_redaction import install_log_redaction
from hatchway.store.cache import Cache, MemoryCache

if TYPE_CHECKING:
    # The MCP SDK (~27 MiB) loads with the first connection, not with the gateway: a gateway that
    # serves only plain models never needs it (see also ``binding.py``).
    from hatchway.engine.tools.mcp.connection import McpConnection, ToolListing

logger = logging.getLogger(__name__)


def connection_key(server: McpServerConfig, org_id: str, *, trusted: bool) -> str:
    """Sessions are per organisation, per trust level and per everything that identifies the
    server and its auth.

    Auth headers are added per call, but the handshake and the session's background stream carry
    the headers of the call that opened it, so two organisations never share a session; and an
    inline plugin never rides an operator's session, which skips the egress checks.
    """
    identity = server.model_dump(include={"url", "command", "args", "transport", "auth"}, mode="json")
    digest = hashlib.sha256(orjson.dumps([identity, trusted], option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    return f"{org_id}:{server.id}:{digest}"


class McpServerPool:
    """Owns every MCP session of the process; ``aclose()`` ends them all (gateway shutdown)."""

    def __init__(
        self,
        *,
        tools_ttl_seconds: float = 300.0,
        cache: Cache | None = None,
        max_answer_bytes: int | None = None,
    ) -> None:
        self.tools_ttl_seconds = tools_ttl_seconds
        self.max_answer_bytes = max_answer_bytes
        """Bytes of one server answer read at most (``max_tool_result_bytes``); None: no bound."""
        """How long a server's tool listing is trusted without a ``tools/list_changed``."""
        self.cache = cache or MemoryCache()
        """Where listings are shared: the gateway's cache (Redis with ``redis_url``: every replica)."""
        self._connections: dict[str, McpConnection] = {}
        self._listings: dict[str, ToolListing] = {}
        self._closed = False
        install_log_redaction()  # the SDK logs tool arguments and results at DEBUG

    def __len__(self) -> int:
        return sum(1 for c in self._connections.values() if not c.lost.is_set())

    async def connection(
        self, server: McpServerConfig, org_id: str, *, trusted: bool, guard: bool = False
    ) -> McpConnection:
        """The live session for ``server``, opening one when there is none (or the last one died).

        Concurrent first calls share one handshake: the connection is registered before it opens.
        ``guard`` checks and pins the addresses it connects to (see ``ScopedTransport``).
        """
        if self._closed:
            raise RuntimeError("the MCP pool is closed")
        key = connection_key(server, org_id, trusted=trusted)
        connection = self._connections.get(key)
        if connection is None or connection.lost.is_set():
            from hatchway.engine.tools.mcp.connection import McpConnection

            install_log_redaction()  # again: loggers of SDK modules imported since
            listing = self.listing(server, org_id, trusted=trusted)
            connection = McpConnection(server, listing, guard=guard, max_answer_bytes=self.max_answer_bytes)
            connection.start()
            self._connections[key] = connection
        await connection.ready()
        return connection

    def listing(self, server: McpServerConfig, org_id: str, *, trusted: bool) -> ToolListing:
        """The cached tool listing of ``server`` for this organisation (kept across reconnects)."""
        key = connection_key(server, org_id, trusted=trusted)
        listing = self._listings.get(key)
        if listing is None:
            from hatchway.engine.tools.mcp.connection import ToolListing

            listing = ToolListing(self.cache, f"mcp:tools:{key}", self.tools_ttl_seconds)
            self._listings[key] = listing
        return listing

    async def discard(self, connection: McpConnection) -> None:
        """Close a session that failed so the next call reconnects."""
        for key, known in list(self._connections.items()):
            if known is connection:
                del self._connections[key]
        await connection.close()

    async def aclose(self) -> None:
        """Close every session (and stop every stdio server process)."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        self._listings.clear()
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
