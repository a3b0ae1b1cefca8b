"""The MCP client pool: one live session per (organisation, server), reused across requests.

The pool is bounded: at most ``max_sessions`` sessions in all and ``max_sessions_per_org`` per
organisation (opening one more closes the least recently used), and a session unused for its idle
time closes (``expire_idle``, run periodically by the gateway): a short one for the servers of inline
plugins, which any caller can name by the hundred, a long one for hatchway.yaml's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from hatchway.config.plugin import McpServerConfig
from hatchway.observability.log_redaction import install_log_redaction
from hatchway.store.cache import Cache, MemoryCache

if TYPE_CHECKING:
    # The MCP SDK (~27 MiB) loads with the first connection, not with the gateway: a gateway that
    # serves only plain models never needs it (see also ``binding.py``).
    from hatchway.engine.tools.mcp.connection import McpConnection, ToolListing

logger = logging.getLogger(__name__)


def connection_key(server: McpServerConfig, org_id: str, *, trusted: bool, user: str | None = None) -> str:
    """Sessions are per organisation, per trust level and per everything that identifies the
    server and its auth.

    Auth headers are added per call, but the handshake and the session's background stream carry
    the headers of the call that opened it, so two organisations never share a session; and an
    inline plugin never rides an operator's session, which skips the egress checks. A server the
    gateway reaches as the end user (per-user OAuth) has sessions and listings per end user too:
    what a server lists and remembers may depend on who is asking.
    """
    if server.auth.per_user:
        parts: list[object] = [_identity(server), trusted, user or ""]
        digest = hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    else:
        digest = _digest(server, trusted)
    return f"{org_id}:{server.id}:{digest}"


def _identity(server: McpServerConfig) -> dict[str, Any]:
    return server.model_dump(include={"url", "command", "args", "transport", "auth"}, mode="json")


_DIGESTS: dict[tuple[int, bool], tuple[McpServerConfig, str]] = {}
"""``connection_key``'s digest of a server, by the config object's identity (a plugin's servers are
the same objects for the process's life; an inline plugin's, for its cache entry's): a call does
not dump and hash its server's config again. Bounded: cleared when full."""


def _digest(server: McpServerConfig, trusted: bool) -> str:
    hit = _DIGESTS.get((id(server), trusted))
    if hit is not None and hit[0] is server:
        return hit[1]
    parts: list[object] = [_identity(server), trusted]
    digest = hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
    if len(_DIGESTS) >= 4096:
        _DIGESTS.clear()
    _DIGESTS[(id(server), trusted)] = (server, digest)
    return digest


@dataclass(frozen=True, slots=True)
class PoolBounds:
    max_sessions: int = 512
    max_sessions_per_org: int = 64
    idle_seconds_untrusted: float = 300.0
    idle_seconds_trusted: float = 3600.0


@dataclass(slots=True)
class _Session:
    connection: McpConnection
    org_id: str
    trusted: bool
    used: float
    busy: int = 0
    """Calls using it now (``connection`` … ``release``): an idle sweep never closes a busy session."""


class McpServerPool:
    """Owns every MCP session of the process; ``aclose()`` ends them all (gateway shutdown)."""

    def __init__(
        self,
        *,
        tools_ttl_seconds: float = 300.0,
        cache: Cache | None = None,
        max_answer_bytes: int | None = None,
        bounds: PoolBounds | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tools_ttl_seconds = tools_ttl_seconds
        """How long a server's tool listing is trusted without a ``tools/list_changed``."""
        self.max_answer_bytes = max_answer_bytes
        """Bytes of one server answer read at most (``max_tool_result_bytes``); None: no bound."""
        self.cache = cache or MemoryCache()
        """Where listings are shared: the gateway's cache (Redis with ``redis_url``: every replica)."""
        self.bounds = bounds or PoolBounds()
        self._clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        """By connection key, least recently used first."""
        self._listings: dict[str, ToolListing] = {}
        self._closed = False
        self.tools_changed: list[Callable[[McpServerConfig], Awaitable[None]]] = []
        """Called when a server announces ``notifications/tools/list_changed`` (the MCP endpoints
        pass it on to their clients)."""
        install_log_redaction()  # the SDK logs tool arguments and results at DEBUG

    async def _announce_tools_changed(self, server: McpServerConfig) -> None:
        for observer in list(self.tools_changed):
            try:
                await observer(server)
            except Exception:  # one observer's failure must not stop the session's reader
                logger.exception("MCP server %s: a tools_changed observer failed", server.id)

    def __len__(self) -> int:
        return sum(1 for s in self._sessions.values() if not s.connection.lost.is_set())

    async def connection(
        self,
        server: McpServerConfig,
        org_id: str,
        *,
        trusted: bool,
        guard: bool = False,
        user: str | None = None,
    ) -> McpConnection:
        """The live session for ``server``, opening one when there is none (or the last one died).

        Concurrent first calls share one handshake: the connection is registered before it opens.
        ``guard`` checks and pins the addresses it connects to (see ``ScopedTransport``).
        """
        if self._closed:
            raise RuntimeError("the MCP pool is closed")
        key = connection_key(server, org_id, trusted=trusted, user=user)
        session = self._sessions.get(key)
        if session is None or session.connection.lost.is_set():
            from hatchway.engine.tools.mcp.connection import McpConnection

            install_log_redaction()  # again: loggers of SDK modules imported since
            await self._make_room(org_id, key)
            listing = self.listing(server, org_id, trusted=trusted, user=user)
            connection = McpConnection(
                server,
                listing,
                guard=guard,
                max_answer_bytes=self.max_answer_bytes,
                on_tools_changed=self._announce_tools_changed,
            )
            connection.start()
            session = _Session(connection, org_id, trusted, self._clock())
            self._sessions[key] = session
        session.used = self._clock()
        session.busy += 1
        self._sessions.move_to_end(key)
        try:
            await session.connection.ready()
        except BaseException:
            self.release(session.connection)
            raise
        return session.connection

    def release(self, connection: McpConnection) -> None:
        """A call is done with ``connection`` (each ``connection()`` is released once)."""
        for session in self._sessions.values():
            if session.connection is connection:
                session.busy = max(session.busy - 1, 0)
                session.used = self._clock()
                return

    async def _make_room(self, org_id: str, key: str) -> None:
        """Close the least recently used sessions until one more fits, in the organisation and in all."""
        bounds = self.bounds
        kept = {k: s for k, s in self._sessions.items() if k != key}  # a dead one of the same key goes
        mine = [k for k, s in kept.items() if s.org_id == org_id]
        doomed = [k for k in self._sessions if k == key]
        doomed += mine[: max(len(mine) - bounds.max_sessions_per_org + 1, 0)]
        others = [k for k in kept if k not in doomed]
        doomed += others[: max(len(others) - bounds.max_sessions + 1, 0)]
        await self._close_keys(doomed, keep_listing=key)

    async def expire_idle(self) -> int:
        """Close the sessions unused for longer than their idle time; returns how many closed."""
        now = self._clock()
        bounds = self.bounds
        doomed = [
            key
            for key, s in self._sessions.items()
            if s.connection.lost.is_set()
            or (
                s.busy == 0
                and now - s.used
                > (bounds.idle_seconds_trusted if s.trusted else bounds.idle_seconds_untrusted)
            )
        ]
        await self._close_keys(doomed)
        return len(doomed)

    async def _close_keys(self, keys: list[str], *, keep_listing: str | None = None) -> None:
        sessions = [self._sessions.pop(k) for k in keys if k in self._sessions]
        for key in keys:
            if key != keep_listing:
                self._listings.pop(key, None)  # the shared cache keeps the listing for its TTL
        await asyncio.gather(*(s.connection.close() for s in sessions), return_exceptions=True)

    def listing(
        self, server: McpServerConfig, org_id: str, *, trusted: bool, user: str | None = None
    ) -> ToolListing:
        """The cached tool listing of ``server`` for this organisation (kept across reconnects)."""
        key = connection_key(server, org_id, trusted=trusted, user=user)
        listing = self._listings.get(key)
        if listing is None:
            from hatchway.engine.tools.mcp.connection import ToolListing

            listing = ToolListing(self.cache, f"mcp:tools:{key}", self.tools_ttl_seconds)
            self._listings[key] = listing
            # Bounded like the sessions: listings of servers without a live session (end users who
            # came once, a per-user server awaiting authorization) go first, oldest first; the shared
            # cache still holds them for their TTL.
            limit = self.bounds.max_sessions * 2
            if len(self._listings) > limit:
                for old in [k for k in self._listings if k not in self._sessions][
                    : len(self._listings) - limit
                ]:
                    del self._listings[old]
        return listing

    async def discard(self, connection: McpConnection) -> None:
        """Close a session that failed so the next call reconnects."""
        for key, known in list(self._sessions.items()):
            if known.connection is connection:
                del self._sessions[key]
        await connection.close()

    async def aclose(self) -> None:
        """Close every session (and stop every stdio server process)."""
        self._closed = True
        sessions = list(self._sessions.values())
        self._sessions.clear()
        self._listings.clear()
        await asyncio.gather(*(s.connection.close() for s in sessions), return_exceptions=True)


async def keep_expiring(pool: McpServerPool, interval_seconds: float) -> None:
    """The gateway's task: close idle sessions every ``interval_seconds``."""
    while True:
        await asyncio.sleep(interval_seconds)
        try:
            await pool.expire_idle()
        except Exception:  # one failed close must not end the sweeping
            logger.exception("could not expire idle MCP sessions")
