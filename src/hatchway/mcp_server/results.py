"""What an MCP endpoint sends back: every result redacted whole, errors in one shape, and the
run-log step of a call.

Whatever an upstream answered — content blocks of any kind (text, base64 images, audio and blobs,
resource links), ``_meta``, structured content, listings' descriptions, prompts, completions, the
questions of a relayed ``input_required`` — reaches the client only after every string in it,
keys included, went through the call's redactor (which knows a secret's base64 forms at any
offset too). A result that no longer validates once redacted (a base64 field that held a secret)
is replaced by an error: the secret is never sent to make it valid.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from hatchway.engine.context import RunContext
from hatchway.engine.run_log import ToolCallStep
from hatchway.engine.tools.payloads import error_body

M = TypeVar("M", bound=BaseModel)
MAX_RECORDED_ARGUMENTS = 8192
"""Characters of a call's arguments the run log keeps (the rest: their size and digest)."""


def redact_result(result: M, ctx: RunContext) -> M:
    """``result`` with every secret ``ctx`` knows taken out of every string in it."""
    if not ctx.secrets:
        return result
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    clean = ctx.redact_value(dumped)
    if clean == dumped:
        return result
    try:
        return type(result).model_validate(clean)
    except ValidationError:
        if isinstance(result, types.CallToolResult):
            return tool_error("The tool's result held a secret and was withheld.", code="result_withheld")  # type: ignore[return-value]
        raise MCPError(
            code=types.INTERNAL_ERROR, message="The upstream's answer held a secret and was withheld."
        ) from None


def relayed_error(rpc: Any, ctx: RunContext) -> MCPError:
    """An upstream's JSON-RPC error as the endpoint's own, redacted."""
    return MCPError(code=rpc.code, message=ctx.redact(rpc.message), data=ctx.redact_value(rpc.data))


def tool_error(message: str, *, code: str | None = None) -> types.CallToolResult:
    """A call's refusal or failure as the client reads it: the body a model reads in the loop."""
    return types.CallToolResult(
        content=[types.TextContent(text=error_body(code or "tool_error", message))], is_error=True
    )


def call_step(
    params: types.CallToolRequestParams,
    result: Any,
    meta: dict[str, Any],
    ctx: RunContext,
    duration_ms: float,
) -> ToolCallStep:
    """The call as the run log records a tool step (as the loop does); arguments bounded."""
    preview = ""
    if isinstance(result, types.CallToolResult):
        preview = next((b.text for b in result.content if isinstance(b, types.TextContent)), "")
    arguments, size = _recorded_arguments(params.arguments or {}, ctx)
    return ToolCallStep.of(
        {k: v for k, v in meta.items() if k != "multi_item"},
        round=ctx.run.round,
        call_id=None,
        name=params.name,
        arguments=arguments,
        duration_ms=round(duration_ms, 3),
        is_error=isinstance(result, types.CallToolResult) and bool(result.is_error),
        result_preview=ctx.redact(preview)[:500],
        arguments_size=size,
    )


def _recorded_arguments(arguments: dict[str, Any], ctx: RunContext) -> tuple[str, tuple[int, str] | None]:
    """The arguments as recorded, and for long ones their full size and digest."""
    text = ctx.redact(orjson.dumps(arguments).decode())
    if len(text) <= MAX_RECORDED_ARGUMENTS:
        return text, None
    digest = hashlib.sha256(text.encode()).hexdigest()
    return text[:MAX_RECORDED_ARGUMENTS], (len(text), digest)
