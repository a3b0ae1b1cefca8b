"""MCP Tasks (``io.modelcontextprotocol/tasks``, SEP-2663) served at ``/mcp/<name>``.

The endpoint advertises the extension; a client whose ``tools/call`` declares it may get a task
instead of the result:

- **relayed** — the upstream server made the call a task: the endpoint records it
  (``task_ledger.py``, an ``endpoint`` row) and answers a task of its own whose id is Hatchway's;
  the upstream's id stays behind it. ``tasks/get`` asks the upstream (through the gateway's MCP
  client: the pool, the vault's credentials, the end user's grant) and answers what it said, with
  Hatchway's id, the result redacted like any relayed result; ``tasks/update`` and ``tasks/cancel``
  are passed on. A task that has ended is answered from the row, without asking the upstream again.
- **an operation** (tools.yaml) awaiting its confirmation is a task in ``input_required`` whose
  input request is the confirmation form; ``tasks/update`` with the answer decides it (executed
  once, by the end user it was requested for), and the task completes with the per-item verdict.
  One awaiting approvers (``approvals.py``) is ``working`` until they decide.

Tasks belong to the organisation, the end user (``X-On-Behalf-Of`` or the token's subject) and the
endpoint that made them: any other caller is told the task does not exist (-32602). They live in the
database, so any replica answers for them, and expire after ``mcp_tasks.ttl_seconds`` (their
``ttlMs``). An organisation has at most ``mcp_tasks.max_open_per_organisation`` open: past it, the
upstream is called without the extension (it answers at once, or refuses a tool that needs a task).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.jsonrpc import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY
from pydantic import ConfigDict, Field, ValidationError

from hatchway.config.plugin import PluginConfig
from hatchway.config.settings import McpEndpointConfig, McpTaskSettings
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.task_ledger import OPEN, McpTaskRow, TaskLedger, server_ref
from hatchway.engine.tools.mcp.tasks import (
    TASKS_EXTENSION,
    TERMINAL,
    CreateTaskResult,
    DetailedTask,
    cancel_task,
    declares_tasks,
    get_task,
    update_task,
)
from hatchway.mcp_server.operations import CONFIRM_KEY, EndpointOperations, confirm_request
from hatchway.mcp_server.relay import ClientSide
from hatchway.mcp_server.results import redact_result


class TaskEndpoint(Protocol):
    """What an endpoint's tasks need of it (``Endpoint``)."""

    config: McpEndpointConfig
    plugin: PluginConfig
    operations: EndpointOperations | None

    def mcp_client(self, capabilities: dict[str, Any] | None, answerer: Any = None) -> Any: ...


logger = logging.getLogger(__name__)


class TaskParams(types.RequestParams):
    task_id: str = Field(max_length=256)


class UpdateParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


class _Wire(types.Result):
    """A result the SDK serializes as it is (the tasks extension's shapes are not the SDK's)."""

    model_config = ConfigDict(extra="allow")
    result_type: str = "complete"


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EndpointTasks:
    """The tasks of one endpoint: made by its ``tools/call``, served by ``tasks/*``."""

    def __init__(self, endpoint: TaskEndpoint, ledger: TaskLedger, settings: McpTaskSettings) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.settings = settings

    def install(self, server: Any, answering: Any) -> None:
        """Advertise the extension and serve its three methods (``tasks/result`` and ``tasks/list``
        are not served: the extension removed them, the SDK answers -32601)."""
        server.extensions[TASKS_EXTENSION] = {}
        server.add_request_handler("tasks/get", TaskParams, answering(self.get))
        server.add_request_handler("tasks/update", UpdateParams, answering(self.update))
        server.add_request_handler("tasks/cancel", TaskParams, answering(self.cancel))

    # -- made by tools/call ------------------------------------------------------------------------

    async def may_create(self, client: ClientSide, ctx: RunContext) -> bool:
        """Whether this call may become a task: the client declared the extension and the
        organisation is under its limit of open tasks."""
        if not client.modern or not declares_tasks(client.capabilities):
            return False  # tasks are the 2026-07-28 wire's: a 2025 session's results cannot carry one
        return await self.ledger.open_count(ctx.org_id) < self.settings.max_open_per_organisation

    async def relayed(
        self, created: CreateTaskResult, server_id: str, ref: str | None, tool: str, ctx: RunContext
    ) -> _Wire:
        """The upstream made the call a task: Hatchway's task in front of it."""
        row = self.ledger.endpoint_row(
            org_id=ctx.org_id,
            end_user=ctx.on_behalf_of,
            endpoint=self.endpoint.config.name,
            server_id=server_id,
            server_ref=server_ref(ref),
            tool=tool,
            upstream_task_id=created.task_id,
            status=created.status if created.status in OPEN else "working",
            status_message=ctx.redact(created.status_message)[:500] if created.status_message else None,
        )
        await self.ledger.create_endpoint_task(row)  # durable before the client hears of it
        return self._created(row)

    async def operation(
        self, op_id: str, digest: str | None, question: str, tool: str, ctx: RunContext, *, approval: bool
    ) -> _Wire:
        """An operation awaiting its confirmation (``input_required``) or its approvers (``working``)."""
        row = self.ledger.endpoint_row(
            org_id=ctx.org_id,
            end_user=ctx.on_behalf_of,
            endpoint=self.endpoint.config.name,
            server_id="operations",
            server_ref=server_ref(None),
            tool=tool,
            status="working" if approval else "input_required",
            status_message=ctx.redact(question)[:2000],
            input_requests=None
            if approval
            else {
                CONFIRM_KEY: confirm_request(question).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
            },
            state={"kind": "operation", "operation": op_id, "digest": digest},
        )
        await self.ledger.create_endpoint_task(row)
        return self._created(row)

    def _created(self, row: McpTaskRow) -> _Wire:
        return _Wire(result_type="task", **self._task_fields(row))

    def _task_fields(self, row: McpTaskRow) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "taskId": row.id,
            "status": row.status,
            "createdAt": _iso(row.created_at),
            "lastUpdatedAt": _iso(row.updated_at),
            "ttlMs": int(self.settings.ttl_seconds * 1000),
            "pollIntervalMs": self.settings.endpoint_poll_interval_ms,
        }
        if row.status_message:
            fields["statusMessage"] = row.status_message
        return fields

    # -- tasks/get, tasks/update, tasks/cancel -------------------------------------------------------

    async def get(self, request_ctx: Any, params: TaskParams, ctx: RunContext) -> _Wire:
        row = await self._row(request_ctx, params, ctx)
        if row.status in OPEN:
            row = await self._refresh(row, ctx)
        fields = self._task_fields(row)
        if row.status == "input_required" and row.input_requests:
            fields["inputRequests"] = row.input_requests
        elif row.status == "completed" and row.result is not None:
            fields["result"] = row.result
        elif row.status == "failed":
            fields["error"] = row.error or {"code": types.INTERNAL_ERROR, "message": "the task failed"}
        return _Wire(**fields)

    async def update(self, request_ctx: Any, params: UpdateParams, ctx: RunContext) -> _Wire:
        row = await self._row(request_ctx, params, ctx)
        if row.status not in OPEN:
            return _Wire()  # answers to a task that has ended are ignored (the spec's SHOULD)
        if row.state is not None:
            await self._decide(row, params.input_responses, request_ctx, ctx)
            return _Wire()
        await self._upstream(row, ctx, update_task(str(row.upstream_task_id), params.input_responses))
        await self.ledger.settle(row.id, status="working", input_requests=None)
        return _Wire()

    async def cancel(self, request_ctx: Any, params: TaskParams, ctx: RunContext) -> _Wire:
        row = await self._row(request_ctx, params, ctx)
        if row.status not in OPEN:
            return _Wire()  # idempotent on an ended task
        if row.state is not None:
            await self._withdraw(row, ctx)
            return _Wire()
        # Cooperative: the upstream decides; the next tasks/get says what it became.
        await self._upstream(row, ctx, cancel_task(str(row.upstream_task_id)))
        return _Wire()

    # -- the row, the upstream ------------------------------------------------------------------------

    async def _row(self, request_ctx: Any, params: TaskParams, ctx: RunContext) -> McpTaskRow:
        client = ClientSide.of(request_ctx)
        if not declares_tasks(client.capabilities):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"tasks/* needs the {TASKS_EXTENSION} extension declared in the request's capabilities",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        request = request_ctx.request
        named = decode_header_value(request.headers.get(MCP_NAME_HEADER)) if request is not None else None
        if request is not None and client.modern and named != params.task_id:
            raise MCPError(HEADER_MISMATCH, "the Mcp-Name header must be the request's taskId")
        row = await self.ledger.endpoint_task(
            params.task_id, org_id=ctx.org_id, end_user=ctx.on_behalf_of, endpoint=self.endpoint.config.name
        )
        if row is None:
            raise MCPError(types.INVALID_PARAMS, "no such task (unknown, expired, or not yours)")
        return row

    async def _refresh(self, row: McpTaskRow, ctx: RunContext) -> McpTaskRow:
        if row.state is not None:
            return await self._operation_status(row, ctx)
        detailed = await self._upstream(row, ctx, get_task(str(row.upstream_task_id)), DetailedTask)
        values: dict[str, Any] = {
            "status": detailed.status if detailed.status in (*OPEN, *TERMINAL) else row.status,
            "status_message": ctx.redact(detailed.status_message)[:2000] if detailed.status_message else None,
            # Stored redacted like the result: a tasks/get of the row may not know the secrets.
            "input_requests": ctx.redact_value(detailed.input_requests)
            if detailed.status == "input_required"
            else None,
        }
        if detailed.status == "completed":
            values["result"] = self._redacted(detailed.result, ctx)
        elif detailed.status == "failed":
            error = detailed.error or {}
            values["error"] = {
                "code": error.get("code") if isinstance(error.get("code"), int) else types.INTERNAL_ERROR,
                "message": ctx.redact(str(error.get("message") or "the task failed"))[:2000],
            }
        return await self.ledger.settle(row.id, **values) or row

    def _redacted(self, result: dict[str, Any] | None, ctx: RunContext) -> dict[str, Any]:
        try:
            parsed = types.CallToolResult.model_validate(result or {})
        except ValidationError:
            return {
                "content": [{"type": "text", "text": "the upstream's task ended with no tool result"}],
                "isError": True,
            }
        return redact_result(parsed, ctx).model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _upstream(self, row: McpTaskRow, ctx: RunContext, request: Any, result_type: Any = None) -> Any:
        """A ``tasks/*`` request to the server that made the task (found again by id and address)."""
        server = next(
            (
                s
                for s in self.endpoint.plugin.mcp_servers
                if s.id == row.server_id and server_ref(s.url or s.command) == row.server_ref
            ),
            None,
        )
        if server is None:
            raise MCPError(types.INVALID_PARAMS, "the task's server is no longer part of this endpoint")
        client = self.endpoint.mcp_client({"extensions": {TASKS_EXTENSION: {}}})

        async def send(mcp: Any) -> Any:
            return await mcp.session.send_request(request, result_type or _Wire)

        try:
            return await client.request(server, ctx, send)
        except MCPError:
            raise
        except Exception as exc:
            message = getattr(exc, "message", None) or type(exc).__name__
            raise MCPError(
                types.INTERNAL_ERROR, ctx.redact(f"the upstream could not be asked: {message}")
            ) from None

    # -- operations --------------------------------------------------------------------------------

    async def _operation_status(self, row: McpTaskRow, ctx: RunContext) -> McpTaskRow:
        operations = self.endpoint.operations
        assert operations is not None and row.state is not None
        status, result, requests, message = await operations.task_status(str(row.state["operation"]), ctx)
        if status == row.status and status in OPEN:
            return row
        return (
            await self.ledger.settle(
                row.id, status=status, result=result, input_requests=requests, status_message=message
            )
            or row
        )

    async def _decide(
        self, row: McpTaskRow, responses: dict[str, Any], request_ctx: Any, ctx: RunContext
    ) -> None:
        operations = self.endpoint.operations
        assert operations is not None and row.state is not None
        if row.status != "input_required":
            return  # awaiting its approvers: not the end user's to answer
        caller = self.endpoint.mcp_client(ClientSide.of(request_ctx).capabilities)
        meta: dict[str, Any] = {}
        result = await operations.answered(
            {"kind": "confirm", "operation": row.state["operation"], "digest": row.state.get("digest")},
            responses,
            ctx,
            caller,
            meta,
        )
        if isinstance(result, types.CallToolResult):
            dumped = redact_result(result, ctx).model_dump(mode="json", by_alias=True, exclude_none=True)
            await self.ledger.settle(row.id, status="completed", result=dumped, input_requests=None)

    async def _withdraw(self, row: McpTaskRow, ctx: RunContext) -> None:
        operations = self.endpoint.operations
        assert operations is not None and row.state is not None
        await operations.withdraw(str(row.state["operation"]), ctx)
        await self.ledger.settle(row.id, status="cancelled", input_requests=None)
