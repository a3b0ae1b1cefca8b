"""MCP 2026-07-28 multi-round-trip requests (MRTR, SEP-2322): a tool call that asks for input.

A server may answer ``tools/call`` with ``resultType: "input_required"``: ``inputRequests``
(elicitation, sampling, roots) and an opaque ``requestState``. The client answers each request and
sends the same call again with ``inputResponses``, the state echoed byte for byte, and a new
JSON-RPC id. The SDK's ``Client.call_tool`` runs that loop with in-process callbacks; Hatchway
drives it itself (``call_tool_with_inputs``) because the answer to an elicitation may have to come
from the end user on a later turn, so a round must be able to stop and resume from stored state.

Who answers is an ``InputAnswerer``: the probe answers from its options, the gateway asks the end
user. Roots are answered with an empty list (the gateway has no filesystem to share).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import HEADER_MISMATCH
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hatchway.engine.run_log import InputRoundStep
from hatchway.engine.tools.mcp.tasks import CreateTaskResult
from hatchway.errors import ToolError

MAX_INPUT_ROUNDS = 10
"""Rounds of one call at most (the SDKs' default): a server that keeps asking is cut off."""


@dataclass(slots=True)
class InputRound:
    """One ``input_required`` answer of a server, as the answerer sees it."""

    server_id: str
    tool: str
    number: int
    """1 for the first round of input, 2 for the next…"""
    requests: dict[str, Any]
    """The server's ``inputRequests`` by key (SDK models: ElicitRequest, CreateMessageRequest,
    ListRootsRequest)."""
    request_state: str | None
    arguments: dict[str, Any] | None = None
    """The call's arguments (what a question held across turns must send again)."""
    ctx: Any = None
    """The run's ``RunContext`` (its organisation, conversation and end user)."""
    server_url: str | None = None
    """Which server asked (a question held across turns goes back to that server only)."""
    sampler: Any = None
    """Answers sampling requests with the run's model (``agent.allow_sampling``); None: refused."""
    task_id: str | None = None
    """When the round is an MCP task's ``input_required`` (``task_calls.py``): the task, which the
    answer goes to (``tasks/update``) instead of a new ``tools/call``."""


class InputAnswerer(Protocol):
    async def answer(self, round_: InputRound) -> dict[str, Any]:
        """The ``inputResponses`` for every key of ``round_.requests``; raises ToolError to stop the call."""


@dataclass(slots=True)
class CallInputs:
    """A call in flight on a session, and who answers its input requests."""

    server_id: str
    tool: str
    answerer: InputAnswerer | None
    sampler: Any = None
    ctx: Any = None


async def sample_for_server(calls: list[CallInputs], request: Any) -> Any:
    """A 2025-11-25 server's own ``sampling/createMessage`` during a call: answered with the run's
    model when the call's plugin allows it, and only while exactly one call is in flight."""
    if len(calls) != 1 or calls[0].sampler is None:
        return types.ErrorData(code=types.INVALID_REQUEST, message="sampling is not allowed for this call")
    try:
        return await calls[0].sampler(request, calls[0].ctx)
    except ToolError as exc:
        return types.ErrorData(code=types.INVALID_REQUEST, message=exc.message)


async def answer_server_request(calls: list[CallInputs], request: Any) -> Any:
    """A 2025-11-25 server's own request (``elicitation/create``) during a call, answered like an
    MRTR round by that call's answerer. The request does not say which call it belongs to, so it is
    answered only while exactly one call is in flight on the session: another call's end user must
    never answer it."""
    if len(calls) != 1 or calls[0].answerer is None:
        reason = "several calls are in flight" if len(calls) > 1 else "no one can answer it here"
        return types.ErrorData(code=types.INVALID_REQUEST, message=f"input request refused: {reason}")
    call = calls[0]
    try:
        responses = await call.answerer.answer(
            InputRound(call.server_id, call.tool, 1, {"request": request}, None)
        )
    except ToolError as exc:
        return types.ErrorData(code=types.INVALID_REQUEST, message=exc.message)
    return responses["request"]


def roots_answer() -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


def elicitation_defaults(request: Any) -> dict[str, Any]:
    """The defaults an elicitation's requested schema declares, by property (SEP-1034)."""
    params = getattr(request, "params", None)
    schema = getattr(params, "requested_schema", None) or {}
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {
        name: prop["default"]
        for name, prop in properties.items()
        if isinstance(prop, dict) and "default" in prop
    }


class GivenAnswers:
    """Answers elicitations with fixed content over the schema's defaults (``mcp probe --answer``)."""

    def __init__(self, content: dict[str, Any] | None) -> None:
        self.content = content

    async def answer(self, round_: InputRound) -> dict[str, Any]:
        responses: dict[str, Any] = {}
        for key, request in round_.requests.items():
            method = getattr(request, "method", "")
            if method == "roots/list":
                responses[key] = roots_answer()
            elif method == "elicitation/create":
                if self.content is None:
                    responses[key] = types.ElicitResult(action="decline")
                else:
                    responses[key] = types.ElicitResult(
                        action="accept", content={**elicitation_defaults(request), **self.content}
                    )
            else:
                raise ToolError(
                    f"{round_.server_id}: the tool asked for {method or 'an unknown kind of input'}, "
                    "which this client does not provide",
                    code="mcp_input_unsupported",
                )
        return responses


async def call_tool_with_inputs(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    *,
    server_id: str,
    answerer: InputAnswerer | None,
    meta: dict[str, Any] | None = None,
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
    on_round: Callable[[InputRound], Awaitable[None]] | None = None,
    max_rounds: int = MAX_INPUT_ROUNDS,
    ctx: Any = None,
    first_round: int = 1,
    server_url: str | None = None,
    sampler: Any = None,
    progress: Any = None,
) -> types.CallToolResult | CreateTaskResult:
    """Call ``tool``, answering every round of input through ``answerer`` (refused when None).

    ``input_responses`` / ``request_state`` resume a call whose earlier round was answered later
    (the end user's next turn). Every round is a new request with a new JSON-RPC id; the state is
    passed on exactly as received and never read. A server that makes the call a task (MCP tasks,
    which may also end a round of input) answers a ``CreateTaskResult``: the caller follows it
    (``task_calls.py``).
    """
    responses, state = input_responses, request_state
    # Rounds are numbered across turns (a call resumed after the user's answer goes on counting),
    # and ``max_rounds`` bounds them all.
    for number in range(first_round, max_rounds + 2):
        result = await _send(client, tool, arguments, meta, responses, state, progress)
        if not isinstance(result, types.InputRequiredResult):
            if isinstance(result, CreateTaskResult):
                return result
            if not isinstance(result, types.CallToolResult):
                raise ToolError(f"{server_id}: the server answered tools/call with an unexpected result")
            return result
        if number > max_rounds:
            break
        round_ = InputRound(
            server_id,
            tool,
            number,
            dict(result.input_requests or {}),
            result.request_state,
            arguments=arguments,
            ctx=ctx,
            server_url=server_url,
            sampler=sampler,
        )
        if ctx is not None:
            ctx.run.report(InputRoundStep(server_id, tool, number, asked=tuple(sorted(_methods(round_)))))
        if on_round is not None:
            await on_round(round_)
        if not round_.requests:
            responses = None  # state only: the server is working; ask again
        elif answerer is None:
            raise ToolError(
                f"{server_id}: the tool asked for input ({', '.join(sorted(_methods(round_)))}), "
                "which this gateway cannot answer here",
                code="mcp_input_unsupported",
            )
        else:
            responses = await answerer.answer(round_)
        state = result.request_state
    raise ToolError(
        f"{server_id}: the tool kept asking for input after {max_rounds} rounds",
        code="mcp_input_rounds_exceeded",
    )


async def _send(
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None,
    responses: dict[str, Any] | None,
    state: str | None,
    progress: Any = None,
) -> Any:
    async def once() -> Any:
        return await client.session.call_tool(
            tool,
            arguments,
            meta=meta,  # type: ignore[arg-type]
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
            allow_claimed=True,  # a task (``tasks.py``), when the call declared the extension
            progress_callback=progress,
        )

    try:
        return await once()
    except MCPError as mismatch:
        if mismatch.code != HEADER_MISMATCH or client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise
        await client.list_tools()  # the spec's recovery: the listed schema was stale; list and resend once
        return await once()


def _methods(round_: InputRound) -> set[str]:
    return {getattr(request, "method", "?") for request in round_.requests.values()}
