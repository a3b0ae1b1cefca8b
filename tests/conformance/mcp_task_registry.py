"""The tasks an upstream holds (SEP-2663): each one's state machine, the input it waits for, its end.

A task is created by a ``tools/call`` the server chose to run in the background, and is read, fed
and cancelled by ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (``mcp_tasks_extension.py``
serves those). This module holds the state only, in memory, for one server process:

* ``TaskRecord``: one task's status (``working`` → ``input_required`` ⇄ ``working`` → ``completed``
  / ``failed`` / ``cancelled``; a terminal status never changes again), its pending
  ``inputRequests`` and its wire shapes (``CreateTaskResult``, ``DetailedTask``).
* ``TaskRegistry``: the records by id, the background work (one task group, entered for the
  server's lifetime) and the counters ``GET /stats`` reports.

A task and its result stay readable for ``TASK_TTL_MS`` from creation, then are forgotten (a
``tasks/get`` after that is the unknown-task ``-32602``).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import anyio
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CreateMessageResult,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputRequiredResult,
    ListRootsResult,
)
from pydantic import BaseModel

logger = logging.getLogger(__name__)

TASK_TTL_MS = 600_000
"""How long a task, and its result once it has one, stays readable after creation: ten minutes."""

POLL_INTERVAL_MS = 100
"""The polling interval suggested to clients (short: the fixtures finish in seconds)."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[TaskStatus] = frozenset({"completed", "failed", "cancelled"})

# What answers each kind of input request (the SEP-2322 pairs), to validate a tasks/update.
_RESPONSE_TYPES: dict[str, type[BaseModel]] = {
    "elicitation/create": ElicitResult,
    "sampling/createMessage": CreateMessageResult,
    "roots/list": ListRootsResult,
}

Work = Callable[[], Awaitable[Any]]
"""A tool call to run as a task: the SDK's ``call_next`` bound to the original request."""

_current_task: ContextVar[TaskRecord | None] = ContextVar("current_task", default=None)


def current_task() -> TaskRecord | None:
    """The task the calling tool body runs as, or ``None`` when it runs synchronously."""
    return _current_task.get()


def _timestamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(eq=False)
class TaskRecord:
    """One task: its status, what it waits for and what it ended with."""

    task_id: str
    tool: str
    created_at: datetime
    updated_at: datetime
    status: TaskStatus = "working"
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    pending: dict[str, InputRequest] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    _answers: dict[str, BaseModel] = field(default_factory=dict)
    _asked: set[str] = field(default_factory=set)
    _answered: anyio.Event = field(default_factory=anyio.Event)

    def _move(self, status: TaskStatus, message: str | None = None) -> bool:
        if self.status in TERMINAL:
            return False
        self.status, self.status_message = status, message
        self.updated_at = datetime.now(UTC)
        return True

    def complete(self, result: dict[str, Any]) -> None:
        if self._move("completed"):
            self.result = result

    def fail(self, error: ErrorData) -> None:
        if self._move("failed", error.message):
            self.error = error.model_dump(by_alias=True, mode="json", exclude_none=True)

    def cancel(self) -> bool:
        """Settle as ``cancelled`` and stop the work; ``False`` when the task had already ended."""
        if not self._move("cancelled", "Cancelled by the client."):
            return False
        self.pending.clear()
        self.scope.cancel()
        return True

    async def ask(self, requests: Mapping[str, InputRequest]) -> dict[str, BaseModel]:
        """Park the task in ``input_required`` until every key of ``requests`` is answered."""
        reused = self._asked & requests.keys()
        if reused:  # keys are unique over a task's lifetime (SEP-2663)
            raise RuntimeError(f"input request keys already used in this task: {sorted(reused)}")
        self._asked |= requests.keys()
        self.pending.update(requests)
        self._move("input_required")
        while not requests.keys() <= self._answers.keys():
            await self._answered.wait()
        return {key: self._answers.pop(key) for key in requests}

    def answer(self, responses: Mapping[str, Mapping[str, Any]]) -> None:
        """Take the ``inputResponses`` of a ``tasks/update``; keys not pending are ignored.

        A response of the wrong shape for its request refuses the whole update (a ValidationError,
        ``-32602`` on the wire) before anything is applied.
        """
        parsed = {
            key: _RESPONSE_TYPES[self.pending[key].method].model_validate(raw)
            for key, raw in responses.items()
            if key in self.pending
        }
        if not parsed:
            return
        for key in parsed:
            del self.pending[key]
        self._answers.update(parsed)
        if not self.pending:
            self._move("working")
        self._answered.set()
        self._answered = anyio.Event()

    def expired(self, now: datetime) -> bool:
        return now - self.created_at > timedelta(milliseconds=TASK_TTL_MS)

    def _task(self) -> dict[str, Any]:
        """The ``Task`` fields every shape carries."""
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _timestamp(self.created_at),
            "lastUpdatedAt": _timestamp(self.updated_at),
            "ttlMs": TASK_TTL_MS,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.status_message is not None:
            task["statusMessage"] = self.status_message
        return task

    def created(self) -> dict[str, Any]:
        """The ``CreateTaskResult`` answering the ``tools/call``: the task, flat, nothing inlined."""
        return {"resultType": "task", **self._task()}

    def detailed(self) -> dict[str, Any]:
        """The ``DetailedTask`` answering ``tasks/get``: the task plus what its status carries."""
        detailed: dict[str, Any] = {"resultType": "complete", **self._task()}
        if self.status == "input_required":
            detailed["inputRequests"] = {
                key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, request in self.pending.items()
            }
        elif self.status == "completed":
            detailed["result"] = self.result
        elif self.status == "failed":
            detailed["error"] = self.error
        return detailed


def _tool_result(outcome: Any) -> dict[str, Any] | ErrorData:
    """A finished tool call as the ``result`` a completed task inlines (or why it cannot be one)."""
    if isinstance(outcome, InputRequiredResult):
        return ErrorData(code=INTERNAL_ERROR, message="The tool asked for SEP-2322 input inside a task")
    if isinstance(outcome, BaseModel):
        return outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(outcome or {})


class TaskRegistry:
    """Every task of one server process, the work behind them and what ``/stats`` reports."""

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._calls: Counter[str] = Counter()
        self._cancelled: list[str] = []
        self._group: TaskGroup | None = None

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The scope tasks run in (the server's lifespan): leaving it cancels whatever still runs."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    def count_call(self, tool: str) -> None:
        """Record a ``tools/call`` whose tool body started (synchronously or as a task)."""
        self._calls[tool] += 1

    def start(self, tool: str, work: Work) -> TaskRecord:
        """Create a task running ``work`` in the background; it is readable before this returns."""
        if self._group is None:
            raise RuntimeError("TaskRegistry.start() outside TaskRegistry.serving() (the server's lifespan)")
        now = datetime.now(UTC)
        record = TaskRecord(task_id=str(uuid.uuid4()), tool=tool, created_at=now, updated_at=now)
        self._records[record.task_id] = record
        self._group.start_soon(self._run, record, work, name=f"task {record.task_id} ({tool})")
        return record

    async def _run(self, record: TaskRecord, work: Work) -> None:
        _current_task.set(record)  # this background task's own context: the tool body reads it
        with record.scope:
            try:
                outcome = _tool_result(await work())
            except MCPError as exc:  # a JSON-RPC error: the task fails with it
                outcome = exc.error
            except Exception:
                logger.exception("task %s (%s) crashed", record.task_id, record.tool)
                outcome = ErrorData(code=INTERNAL_ERROR, message="Internal error")
            if isinstance(outcome, ErrorData):
                record.fail(outcome)
            else:
                record.complete(outcome)

    def find(self, task_id: str) -> TaskRecord:
        """The task ``task_id`` names; ``-32602`` when there is none (never was, or expired)."""
        self._forget_expired()
        record = self._records.get(task_id)
        if record is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Failed to retrieve task: no task {task_id!r}")
        return record

    def cancel(self, record: TaskRecord) -> None:
        if record.cancel():
            self._cancelled.append(record.task_id)

    def _forget_expired(self) -> None:
        now = datetime.now(UTC)
        for task_id in [task_id for task_id, record in self._records.items() if record.expired(now)]:
            self._records.pop(task_id).scope.cancel()

    def stats(self) -> dict[str, Any]:
        """``{"calls": {tool: n}, "cancelled": [taskId], "tasks": {taskId: status}}``."""
        self._forget_expired()
        return {
            "calls": dict(self._calls),
            "cancelled": list(self._cancelled),
            "tasks": {task_id: record.status for task_id, record in self._records.items()},
        }

    def reset(self) -> None:
        """Back to a fresh server: every task stopped and forgotten, every counter zero."""
        for record in self._records.values():
            record.scope.cancel()
        self._records.clear()
        self._calls.clear()
        self._cancelled.clear()
