"""Who an MCP endpoint tells when an upstream's tools change: its 2025-11-25 sessions.

A session that lists tools is remembered by its id (with the SDK's ``ServerSession`` that can
reach it); it is forgotten when it is deleted, after the SDK's idle timeout without a request, or
when telling it fails. Upstream notifications are coalesced: one announcer task per endpoint, at
most one announcement per ``MIN_INTERVAL_SECONDS``, however many notifications arrive (a server
sending a storm of ``tools/list_changed`` costs one pass over the sessions per interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import Any

MIN_INTERVAL_SECONDS = 1.0
SEND_TIMEOUT_SECONDS = 5.0


class ListChangeListeners:
    """The sessions of one endpoint to tell, and the one task telling them."""

    def __init__(self, *, max_sessions: int, idle_seconds: float) -> None:
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._sessions: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def remember(self, session_id: str, session: Any) -> None:
        self._expire()
        self._sessions[session_id] = (session, time.monotonic())
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:  # only when every entry is live: the oldest
            self._sessions.popitem(last=False)

    def seen(self, session_id: str) -> None:
        entry = self._sessions.get(session_id)
        if entry is not None:
            self._sessions[session_id] = (entry[0], time.monotonic())

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def changed(self) -> None:
        """An upstream's tools changed: announce soon (once, whatever else arrives meanwhile)."""
        self._dirty.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._announcer())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _announcer(self) -> None:
        while self._dirty.is_set():
            self._dirty.clear()
            self._expire()
            for session_id, (session, _) in list(self._sessions.items()):
                try:
                    async with asyncio.timeout(SEND_TIMEOUT_SECONDS):
                        await session.send_tool_list_changed()
                except Exception:  # the session is gone: forget it
                    self._sessions.pop(session_id, None)
            await asyncio.sleep(MIN_INTERVAL_SECONDS)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        for session_id in [s for s, (_, last) in self._sessions.items() if last < cutoff]:
            del self._sessions[session_id]
