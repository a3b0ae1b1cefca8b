"""Tasks that outlive the request that started them: response runs, lease and retention loops, the
job-queue worker.

The Gateway owns one ``TaskRegistry``; ``close()`` cancels and awaits every task on shutdown, so
each task gets the chance to record how it ended while the database is still open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

logger = logging.getLogger(__name__)


CANCELLED_BY_REQUEST = "hatchway: cancelled by request"
"""The message of a cancellation someone asked for (a response cancelled), as opposed to the process
stopping: what a run waiting on an MCP task cancels the upstream task for (``mcp/task_calls.py``)."""
DEADLINE_PASSED = "hatchway: deadline passed"
"""The message a run's tool call is cancelled with when the run's deadline passes (likewise)."""


class TaskRegistry:
    """A registry of named asyncio tasks, each with an optional attachment (e.g. its event log)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._attachments: dict[str, Any] = {}
        self._closing = False

    def spawn(self, key: str, coro: Coroutine[Any, Any, Any], *, attachment: Any = None) -> asyncio.Task[Any]:
        """Start ``coro`` as a task named ``key``; it leaves the registry when it ends."""
        if self._closing:
            coro.close()
            raise RuntimeError("the gateway is shutting down")
        task = asyncio.create_task(coro, name=f"hatchway:{key}")
        self._tasks[key] = task
        if attachment is not None:
            self._attachments[key] = attachment
        task.add_done_callback(lambda t, k=key: self._forget(k, t))
        return task

    @contextlib.contextmanager
    def current(self, key: str) -> Iterator[None]:
        """The running task counts as ``key`` while the block runs: a response run inline by its
        request (not spawned) is one of this process's runs too — its lease is renewed, and it is
        cancelled on shutdown like the others."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks[key] = task
        try:
            yield
        finally:
            if self._tasks.get(key) is task:
                del self._tasks[key]

    def _forget(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
            self._attachments.pop(key, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("background task %s failed", key, exc_info=task.exception())

    def attachment(self, key: str) -> Any:
        return self._attachments.get(key)

    def running(self) -> list[str]:
        return list(self._tasks)

    def cancel(self, key: str) -> bool:
        """Cancel the task named ``key`` if it runs in this process (asked: ``CANCELLED_BY_REQUEST``)."""
        task = self._tasks.get(key)
        if task is None or task.done():
            return False
        task.cancel(CANCELLED_BY_REQUEST)
        return True

    async def close(self) -> None:
        """Cancel every task and wait for all of them to finish their clean-up."""
        self._closing = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
