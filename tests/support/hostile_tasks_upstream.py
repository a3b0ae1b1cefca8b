"""An MCP server whose tasks (SEP-2663) say whatever a test scripts: the hostile upstream of
``tests/security/test_mcp_task_attacks.py``.

Written with the official SDK (``MCPServer``) and the tasks extension on its hooks, like
``tests/conformance/mcp_tasks_upstream.py``, but nothing here is honest: ``tools/call`` of ``job``
answers the ``CreateTaskResult`` that ``TaskScript.created`` makes — whether the request declared
the extension or not — and ``tasks/get`` the ``DetailedTask`` that ``TaskScript.detailed`` makes
for its n-th poll. Both are given the request's ``Authorization`` header, to echo it back.
``TaskScript.seen`` records each request's method, whether it declared the extension, and the
``taskId`` it named.

    script = TaskScript(created=..., detailed=...)
    with ServerThread(build_app(script), host="127.0.0.1") as server: ...  # /mcp
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolRequestParams, RequestParams
from pydantic import Field
from starlette.applications import Starlette

from tests.conformance.mcp_everything_upstream import LOOPBACK_SECURITY
from tests.conformance.mcp_tasks_extension import TASKS_EXTENSION, declares_tasks

Made = Callable[[str], dict[str, Any]]
"""The bearer the request carried → what to answer."""
Polled = Callable[[str, int], dict[str, Any]]
"""The bearer and the poll's number (1, 2, …) → what ``tasks/get`` answers."""


def working(task_id: str = "t-1", **fields: Any) -> dict[str, Any]:
    """A task's fields, ``working`` unless ``fields`` say otherwise."""
    return {"taskId": task_id, "status": "working", "pollIntervalMs": 50, **fields}


@dataclass
class TaskScript:
    """What the server answers, and what it was asked."""

    created: Made = field(default=lambda _bearer: {"resultType": "task", **working()})
    detailed: Polled = field(default=lambda _bearer, _n: {"resultType": "complete", **working()})
    seen: list[tuple[str, bool, str | None]] = field(default_factory=list)
    """(method, declared the extension, taskId) of each request, in order."""

    def asked(self, method: str) -> list[tuple[str, bool, str | None]]:
        return [s for s in self.seen if s[0] == method]


class _TaskIdParams(RequestParams):
    task_id: str


class _UpdateParams(_TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


def _bearer(ctx: ServerRequestContext[Any, Any]) -> str:
    return ctx.request.headers.get("authorization", "") if ctx.request is not None else ""


class HostileTasks(Extension):
    """Answers ``job`` with a task and ``tasks/*`` with whatever ``script`` says."""

    identifier = TASKS_EXTENSION

    def __init__(self, script: TaskScript) -> None:
        self.script = script

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", _TaskIdParams, self._get),
            MethodBinding("tasks/update", _UpdateParams, self._ack("tasks/update")),
            MethodBinding("tasks/cancel", _TaskIdParams, self._ack("tasks/cancel")),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self.script.seen.append(("tools/call", declares_tasks(ctx), None))
        if params.name != "job":
            return await call_next(ctx)
        return self.script.created(_bearer(ctx))  # declared or not

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
        self.script.seen.append(("tasks/get", declares_tasks(ctx), params.task_id))
        return self.script.detailed(_bearer(ctx), len(self.script.asked("tasks/get")))

    def _ack(self, method: str) -> Any:
        async def ack(ctx: ServerRequestContext[Any, Any], params: _TaskIdParams) -> dict[str, Any]:
            self.script.seen.append((method, declares_tasks(ctx), params.task_id))
            return {"resultType": "complete"}

        return ack


def build_app(script: TaskScript) -> Starlette:
    """The streamable-HTTP ASGI app (``/mcp``) of a server following ``script``."""
    mcp = MCPServer(
        "hatchway-hostile-tasks", version="1.0.0", log_level="WARNING", extensions=[HostileTasks(script)]
    )

    @mcp.tool(description="A job the server always makes a task of.")
    def job(label: str = "") -> str:
        return f"synchronous {label}"

    return mcp.streamable_http_app(streamable_http_path="/mcp", transport_security=LOOPBACK_SECURITY)
