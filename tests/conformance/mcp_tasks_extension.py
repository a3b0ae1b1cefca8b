"""SEP-2663, the tasks extension (``io.modelcontextprotocol/tasks``), served on the official SDK's hooks.

The Python SDK (2.3) has the extension interface (``mcp.server.extension.Extension``) but not tasks;
``TasksExtension`` builds the server half on it, over the state in ``mcp_task_registry.py``:

* ``capabilities.extensions["io.modelcontextprotocol/tasks"] = {}`` on ``server/discover`` (the SDK
  advertises every extension there; never ``capabilities.tasks``).
* ``intercept_tool_call``: a tool declared task-supporting (``TaskSupport``) called by a client
  whose request declares the extension (``_meta["io.modelcontextprotocol/clientCapabilities"]
  .extensions``, on the 2026-07-28 wire: there is no session level) is started in the background
  and answered with a flat ``CreateTaskResult``. Without the declaration an ``optional`` tool runs
  synchronously and a ``required`` one is refused with ``-32021``. Every other tool runs as usual,
  whatever legacy ``task`` param the call carries.
* ``tasks/get`` (the ``DetailedTask``), ``tasks/update`` (``inputResponses``, partial ones too) and
  ``tasks/cancel`` (idempotent), each acknowledged with ``resultType: "complete"``; ``-32021``
  without the declaration, ``-32602`` for an unknown task, ``-32020`` (HTTP 400) when ``Mcp-Name``
  is not the ``taskId`` (the SDK checks that header for ``tools/call`` and the like only).
  ``tasks/result`` and ``tasks/list`` are not served: ``-32601``.
* ``advertise_task_support``, a server middleware: ``execution: {"taskSupport": ...}`` on the
  task-supporting tools of ``tools/list`` (the SDK's 2026-07-28 ``Tool`` has no such field, so it
  is added after the SDK has shaped the result).
* ``gather_input``: how a task-supporting tool asks the client something — through the task
  (``input_required`` until ``tasks/update`` answers) when it runs as one, else the SEP-2322 way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp.types import (
    HEADER_MISMATCH,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    InputRequest,
    InputRequiredResult,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from tests.conformance.mcp_task_registry import TaskRecord, TaskRegistry, current_task

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)  # the extension is not defined on the 2025-11-25 wire


@dataclass(frozen=True)
class TaskSupport:
    """How a tool takes part in tasks (its ``execution.taskSupport``).

    ``before_task``, when set, runs on the ``tools/call`` before any task exists: an
    ``InputRequiredResult`` it returns is answered on the call itself (SEP-2322), and the task is
    created on the round where it returns ``None`` (SEP-2663's MRTR-then-task composition).
    """

    mode: Literal["optional", "required"]
    before_task: Callable[[CallToolRequestParams], InputRequiredResult | None] | None = None


class TaskIdParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, dict[str, Any]]


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client capabilities include the tasks extension."""
    capabilities = ctx.session.client_capabilities
    declared = capabilities.extensions if capabilities is not None else None
    return ctx.protocol_version in _MODERN and bool(declared) and TASKS_EXTENSION in declared


def _missing_tasks_capability() -> MCPError:
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"This request needs the client capability extensions[{TASKS_EXTENSION!r}]",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def _check_routing_header(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """SEP-2663 over HTTP: ``Mcp-Name`` carries the ``taskId`` (SEP-2243: else ``-32020``)."""
    if ctx.request is None:  # not over HTTP: no header to match
        return
    if decode_header_value(ctx.request.headers.get(MCP_NAME_HEADER)) != task_id:
        raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header does not match params.taskId")


async def gather_input(
    ctx: Context, requests: Mapping[str, InputRequest]
) -> dict[str, BaseModel] | InputRequiredResult:
    """Every answer to ``requests``, keyed alike; as a task, waits for them (``input_required``).

    Run synchronously, returns the ``InputRequiredResult`` to answer the call with until a retry
    carries every answer (SEP-2322).
    """
    task = current_task()
    if task is not None:
        return await task.ask(requests)
    answers = ctx.input_responses or {}
    if requests.keys() <= answers.keys():
        return {key: answers[key] for key in requests}
    return InputRequiredResult(input_requests=dict(requests))


class TasksExtension(Extension):
    """``io.modelcontextprotocol/tasks`` for the tools ``support`` names, tasks kept in ``registry``."""

    identifier = TASKS_EXTENSION

    def __init__(self, support: Mapping[str, TaskSupport], registry: TaskRegistry) -> None:
        self._support = dict(support)
        self._registry = registry

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=_MODERN),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, protocol_versions=_MODERN),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=_MODERN),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        support = self._support.get(params.name)
        as_task = support is not None and declares_tasks(ctx)
        if support is not None and support.mode == "required" and not as_task:
            raise _missing_tasks_capability()
        if support is not None and as_task and support.before_task is not None:
            pending = support.before_task(params)
            if pending is not None:
                return pending
        self._registry.count_call(params.name)
        if not as_task:
            return await call_next(ctx)
        return self._registry.start(params.name, partial(call_next, ctx)).created()

    def _task(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskRecord:
        _check_routing_header(ctx, task_id)
        if not declares_tasks(ctx):
            raise _missing_tasks_capability()
        return self._registry.find(task_id)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        return self._task(ctx, params.task_id).detailed()

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        self._task(ctx, params.task_id).answer(params.input_responses)
        return {"resultType": "complete"}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        self._registry.cancel(self._task(ctx, params.task_id))
        return {"resultType": "complete"}

    async def advertise_task_support(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Server middleware: ``execution.taskSupport`` on each task-supporting tool of ``tools/list``."""
        result = await call_next(ctx)
        if ctx.method != "tools/list" or ctx.protocol_version not in _MODERN or not isinstance(result, dict):
            return result
        tools = [
            {**tool, "execution": {"taskSupport": self._support[tool["name"]].mode}}
            if tool.get("name") in self._support
            else tool
            for tool in result.get("tools", [])
        ]
        return {**result, "tools": tools}

    @asynccontextmanager
    async def lifespan(self, _server: object) -> AsyncIterator[dict[str, Any]]:
        """The server's lifespan (``MCPServer(lifespan=...)``): tasks run inside it."""
        async with self._registry.serving():
            yield {}
