"""MCP Tasks (``io.modelcontextprotocol/tasks``, SEP-2663) on the client side: the wire shapes.

A server that has the extension may answer a ``tools/call`` whose request declared it with a
``CreateTaskResult`` (``resultType: "task"``) instead of the tool's result: a handle the client
polls with ``tasks/get`` (every ``pollIntervalMs``) until the task is ``completed`` (the tool's
result inlined), ``failed`` (a JSON-RPC error) or ``cancelled``; a task in ``input_required``
carries ``inputRequests`` (MRTR's shapes) that the client answers with ``tasks/update``;
``tasks/cancel`` asks the server to stop. ``tasks/*`` requests carry ``Mcp-Name: <taskId>``.

The SDK (2.3) has no tasks runtime; it has the hooks: a ``ClientExtension`` whose ``ResultClaim``
makes ``call_tool`` parse the ``task`` shape (``TasksExtension``), and requests of any method whose
``name_param`` fills ``Mcp-Name``. How the gateway drives a task — durably, across replicas — is
``task_calls.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict, Field, TypeAdapter

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class CreateTaskResult(types.Result):
    """``resultType: "task"``: the server runs the call as a task (flat: ``Result & Task``)."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str = Field(min_length=1, max_length=256)
    status: str = "working"
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """``tasks/get``'s answer: the task and, by status, ``inputRequests``, ``result`` or ``error``."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    status: TaskStatus
    """One of the extension's five (anything else is not a task: ``mcp_protocol_error``)."""
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    """Raw by key (validated into SDK request models by ``input_requests_of``)."""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class _TaskParams(types.RequestParams):
    task_id: str


class _UpdateParams(_TaskParams):
    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTaskRequest(types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


def get_task(task_id: str) -> GetTaskRequest:
    return GetTaskRequest(params=_TaskParams(task_id=task_id))


def update_task(task_id: str, responses: dict[str, Any]) -> UpdateTaskRequest:
    wire = {
        key: value.model_dump(mode="json", by_alias=True, exclude_none=True)
        if hasattr(value, "model_dump")
        else value
        for key, value in responses.items()
    }
    return UpdateTaskRequest(params=_UpdateParams(task_id=task_id, input_responses=wire))


def cancel_task(task_id: str) -> CancelTaskRequest:
    return CancelTaskRequest(params=_TaskParams(task_id=task_id))


_INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(types.InputRequest)


def input_requests_of(task: DetailedTask) -> dict[str, Any]:
    """The task's ``inputRequests`` as SDK models (ElicitRequest, CreateMessageRequest, ListRootsRequest);
    ValueError for one that is none of them."""
    return {key: _INPUT_REQUEST.validate_python(value) for key, value in (task.input_requests or {}).items()}


async def _unused(_created: CreateTaskResult, _ctx: ClaimContext) -> types.CallToolResult:
    # The gateway drives tasks itself (``task_calls.py``: durably, answering input on a later turn),
    # always through ``call_tool(..., allow_claimed=True)``; the SDK never resolves one.
    raise RuntimeError("tasks are followed by the gateway, not by the SDK's resolver")


class TasksExtension(ClientExtension):
    """Declares the tasks extension on a session's requests and lets ``tools/call`` parse a task."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=_unused),)


def with_tasks(capabilities: dict[str, Any] | None) -> dict[str, Any]:
    """``capabilities`` (a request's declared client capabilities) also declaring the extension."""
    declared = dict(capabilities or {})
    extensions = dict(declared.get("extensions") or {})
    extensions.setdefault(TASKS_EXTENSION, {})
    declared["extensions"] = extensions
    return declared


def without_tasks(capabilities: dict[str, Any] | None) -> dict[str, Any]:
    """``capabilities`` not declaring the extension."""
    declared = dict(capabilities or {})
    extensions = {k: v for k, v in (declared.get("extensions") or {}).items() if k != TASKS_EXTENSION}
    if extensions:
        declared["extensions"] = extensions
    else:
        declared.pop("extensions", None)
    return declared


def declares_tasks(capabilities: dict[str, Any] | None) -> bool:
    extensions = (capabilities or {}).get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions
