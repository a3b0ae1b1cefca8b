"""An agent's tools.yaml tools behind an MCP endpoint: the same operation flow as the chat loop.

A call runs ``OperationService.call`` (requires → pre-validation → the durable operation). When the
operation awaits confirmation, the question goes to the MCP client's user:

- a 2026-07-28 client that declares elicitation gets an ``input_required`` result with one form
  elicitation (``{"confirm": boolean}``); its retry carries the answer and the endpoint's state
  (the operation id and its arguments digest, sealed and bound to the caller by the SDK's
  ``RequestStateBoundary``);
- a 2025-11-25 client that declares elicitation is asked on the request's stream
  (``elicitation/create``) and the call returns once it has answered;
- any other client gets the question and the operation id as the result (``structuredContent``
  ``status: AWAITING_CONFIRMATION``), and decides it with the ``confirm_operation`` tool.

Whichever way, the decision goes through ``confirm_operation`` / ``cancel_operation`` of
``engine/tools/operations/execution.py``: only the end user the operation was requested for
(``X-On-Behalf-Of``) decides it, the digest must match, and it executes once. The result is the
per-item summary as text and, as ``structuredContent``, the verdict and ``results[]``.
"""

from __future__ import annotations

from typing import Any, Protocol

import mcp_types as types
import orjson

from hatchway.engine.context import RunContext
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.execution import cancel_operation, confirm_operation
from hatchway.engine.tools.operations.messages import operation_output, operation_summary
from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus
from hatchway.engine.tools.operations.service import OperationService, ResultKind
from hatchway.errors import HatchwayError, NotFound
from hatchway.mcp_server.relay import ClientSide, confirm_state
from hatchway.mcp_server.results import tool_error

S = OperationStatus
CONFIRM_TOOL = "confirm_operation"
CONFIRM_KEY = "confirm"
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        CONFIRM_KEY: {"type": "boolean", "title": "Confirm", "description": "Execute this operation?"}
    },
    "required": [CONFIRM_KEY],
}
_CONFIRM_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "operation_id": {"type": "string", "description": "The id the pending operation's result gave."},
        "arguments_digest": {
            "type": "string",
            "description": "The digest the pending operation's result gave: what the user agreed to.",
        },
        "decision": {"type": "string", "enum": ["confirm", "cancel"]},
    },
    "required": ["operation_id", "arguments_digest", "decision"],
    "additionalProperties": False,
}
_FAILED = {S.FAILED, S.CANCELLED, S.OUT_OF_SCOPE, S.INTERRUPTED}


class EndpointOperations:
    """One agent's operations, called through an MCP endpoint (see the module docstring)."""

    def __init__(self, service: OperationService, *, confirm_tool: bool) -> None:
        self.service = service
        self.confirm_tool = confirm_tool and any(
            service.is_operation(name) for name in service.tools.enabled()
        )

    def tools(self) -> list[types.Tool]:
        tools = [
            types.Tool(name=spec.name, description=spec.description, input_schema=spec.parameters)
            for spec in self.service.tool_specs()
        ]
        if self.confirm_tool:
            tools.append(
                types.Tool(
                    name=CONFIRM_TOOL,
                    description=(
                        "Confirm or cancel an operation that awaits the user's confirmation. Call it "
                        "only with the user's own answer to the operation's question."
                    ),
                    input_schema=_CONFIRM_TOOL_SCHEMA,
                    annotations=types.ToolAnnotations(destructive_hint=True, idempotent_hint=True),
                )
            )
        return sorted(tools, key=lambda tool: tool.name)

    def handles(self, name: str) -> bool:
        return self.service.handles(name) or (self.confirm_tool and name == CONFIRM_TOOL)

    def server_of(self, name: str) -> str | None:
        return self.service.server_of(name)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        caller: McpToolCaller,
        client: ClientSide,
        meta: dict[str, Any],
        as_task: AsTask | None = None,
    ) -> Any:
        """The MCP result of one call: a CallToolResult, or an InputRequiredResult asking to confirm;
        with ``as_task`` (a client with the tasks extension) an operation awaiting its confirmation
        or its approvers is a task (``tasks.py``)."""
        if name == CONFIRM_TOOL:
            return await self._confirm_tool(arguments, ctx, caller, meta)
        result = await self.service.call(name, arguments, ctx, caller)
        meta.update(result.meta)
        op = result.operation
        approval = result.kind is ResultKind.AWAITING_APPROVAL
        # A confirmation is a task's input request only for a client that can be asked one (an
        # elicitation); others get the question and ``confirm_operation``, as without tasks.
        if (
            as_task is not None
            and op is not None
            and (approval or (_asks_confirmation(result) and client.can_elicit()))
        ):
            meta["outcome"] = Outcome.INPUT_REQUIRED
            question = result.question or op.confirmation_message or ""
            return await as_task(op.id, op.arguments_digest, question, name, ctx, approval=approval)
        if result.kind is not ResultKind.NEEDS_CONFIRMATION or op is None:
            if op is not None:
                return _final(op, ctx)
            return _text(ctx.redact(result.output), is_error=result.is_error)
        question = result.question or op.confirmation_message or ""
        if client.can_elicit() and client.modern:
            ask = confirm_request(question)
            meta["outcome"] = Outcome.INPUT_REQUIRED
            return types.InputRequiredResult(
                input_requests={CONFIRM_KEY: ask}, request_state=confirm_state(op.id, op.arguments_digest)
            )
        if client.can_elicit():
            answer = await client.session.elicit_form(question, CONFIRM_SCHEMA, client.request_id)
            return await self.decide(op.id, op.arguments_digest, _accepted(answer), ctx, caller, meta)
        return _pending(op, question, ctx)

    async def answered(
        self,
        state: dict[str, Any],
        responses: dict[str, Any] | None,
        ctx: RunContext,
        caller: McpToolCaller,
        meta: dict[str, Any],
    ) -> Any:
        """The 2026-07-28 client's retry with its user's answer to the confirmation."""
        answer = (responses or {}).get(CONFIRM_KEY)
        if answer is None:  # asked, not answered: the spec's "missing input response" is asked again
            op = await self._operation(str(state.get("operation")), ctx)
            if op.state is S.AWAITING_CONFIRMATION:
                ask = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(
                        message=op.confirmation_message or "", requested_schema=CONFIRM_SCHEMA
                    )
                )
                return types.InputRequiredResult(
                    input_requests={CONFIRM_KEY: ask}, request_state=confirm_state(op.id, op.arguments_digest)
                )
            return _final(op, ctx)
        digest = state.get("digest")
        return await self.decide(
            str(state.get("operation")),
            digest if isinstance(digest, str) else None,
            _accepted(answer),
            ctx,
            caller,
            meta,
        )

    async def decide(
        self,
        op_id: str,
        digest: str | None,
        accepted: bool,
        ctx: RunContext,
        caller: McpToolCaller,
        meta: dict[str, Any],
    ) -> types.CallToolResult:
        """Execute (once) or cancel the operation, as the user answered."""
        meta["operation_id"] = op_id
        try:
            await self._operation(op_id, ctx)
            if accepted:
                confirmation = await confirm_operation(
                    self.service.store,
                    op_id,
                    caller,
                    ctx,
                    via="mcp",
                    expected_digest=digest,
                    wait_seconds=self.service.wait_seconds(ctx),
                )
                op = confirmation.operation
            else:
                op = await cancel_operation(
                    self.service.store, op_id, ctx, reason="declined by the user of the MCP client"
                )
        except HatchwayError as exc:
            meta.update(outcome=Outcome.ERROR, error_code=exc.code)
            return _error(exc.code or "operation_error", ctx.redact(exc.message))
        meta["operation_status"] = op.status
        if op.verdict:
            meta["verdict"] = op.verdict.get("status")
        return _final(op, ctx)

    async def _confirm_tool(
        self, arguments: dict[str, Any], ctx: RunContext, caller: McpToolCaller, meta: dict[str, Any]
    ) -> types.CallToolResult:
        op_id, digest, decision = (arguments.get(k) for k in ("operation_id", "arguments_digest", "decision"))
        if not isinstance(op_id, str) or not isinstance(digest, str) or decision not in ("confirm", "cancel"):
            return _error(
                "invalid_arguments",
                "confirm_operation takes operation_id and arguments_digest (strings) and "
                'decision ("confirm" or "cancel").',
            )
        return await self.decide(op_id, digest, decision == "confirm", ctx, caller, meta)

    async def task_status(
        self, op_id: str, ctx: RunContext
    ) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None, str | None]:
        """An operation as a task: (status, result, input requests, status message)."""
        op = await self._operation(op_id, ctx)
        if op.state is S.AWAITING_CONFIRMATION:
            question = op.confirmation_message or ""
            ask = confirm_request(question).model_dump(mode="json", by_alias=True, exclude_none=True)
            return "input_required", None, {CONFIRM_KEY: ask}, ctx.redact(question)[:2000]
        if op.state.is_open or op.state is S.EXECUTING:
            return "working", None, None, op.state.value
        if op.state is S.CANCELLED:
            return "cancelled", None, None, None
        final = _final(op, ctx).model_dump(mode="json", by_alias=True, exclude_none=True)
        return "completed", final, None, op.state.value

    async def withdraw(self, op_id: str, ctx: RunContext) -> None:
        """The client cancelled the operation's task: nothing is executed."""
        op = await self._operation(op_id, ctx)
        if op.state.is_open:
            await cancel_operation(self.service.store, op_id, ctx, reason="the MCP client cancelled its task")

    async def _operation(self, op_id: str, ctx: RunContext) -> OperationRecord:
        """The operation, if it is this organisation's and this endpoint's agent's (else NotFound)."""
        op = await self.service.store.get(op_id, org_id=ctx.org_id)
        if op.agent != self.service.agent:
            raise NotFound(f"no operation '{op_id}' behind this endpoint", code="operation_not_found")
        return op


def _asks_confirmation(result: Any) -> bool:
    return result.kind is ResultKind.NEEDS_CONFIRMATION


class AsTask(Protocol):
    async def __call__(
        self, op_id: str, digest: str | None, question: str, tool: str, ctx: RunContext, *, approval: bool
    ) -> Any: ...


def confirm_request(question: str) -> types.ElicitRequest:
    """The confirmation asked of the client's user: one form with ``{"confirm": boolean}``."""
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=question, requested_schema=CONFIRM_SCHEMA)
    )


def _accepted(answer: Any) -> bool:
    """Whether an elicitation answer says yes: accepted, with ``confirm: true``."""
    if isinstance(answer, dict):
        answer = types.ElicitResult.model_validate(answer)
    if not isinstance(answer, types.ElicitResult) or answer.action != "accept":
        return False
    return (answer.content or {}).get(CONFIRM_KEY) is True


def _final(op: OperationRecord, ctx: RunContext) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=ctx.redact(operation_output(op)))],
        structured_content=ctx.redact_value(operation_summary(op)),
        is_error=op.state in _FAILED,
    )


def _pending(op: OperationRecord, question: str, ctx: RunContext) -> types.CallToolResult:
    body = {
        **operation_summary(op),
        "question": question,
        "arguments_digest": op.arguments_digest,
        "instructions": (
            f"Nothing was executed. Ask the user this question; then call {CONFIRM_TOOL} with this "
            'operation_id and arguments_digest, and decision "confirm" or "cancel" as the user answered.'
        ),
    }
    clean = ctx.redact_value(body)
    return types.CallToolResult(
        content=[types.TextContent(text=orjson.dumps(clean).decode())], structured_content=clean
    )


def _text(text: str, *, is_error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def _error(code: str, message: str) -> types.CallToolResult:
    return tool_error(message, code=code)
