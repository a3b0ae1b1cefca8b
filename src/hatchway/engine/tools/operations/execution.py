"""Execute a claimed operation once, and confirm one (from a reply or ``POST …/confirm``).

The primary tool is called exactly once, with the frozen ``resolved_arguments`` and the operation
id as the idempotency key in the MCP request's ``_meta``. Whoever loses the claim never calls the
tool: it waits for the winner's outcome and returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import orjson

from hatchway.access.gatekeeper import request_id_of
from hatchway.audit import AuditEvent
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpCallResult, McpToolCaller
from hatchway.engine.tools.operations.classify import classify_results
from hatchway.engine.tools.operations.models import (
    OperationRecord,
    OperationStatus,
    arguments_digest,
    operation_to_dict,
)
from hatchway.engine.tools.operations.store import EXPIRED, OperationStore
from hatchway.errors import Conflict, PermissionDenied, ToolError, ToolOutcomeUnknown, ToolTimeout

S = OperationStatus
MAX_STORED_RESULT_CHARS = 65_536
OPERATION_META_KEY = "io.hatchway/operation_id"


@dataclass(slots=True)
class Confirmation:
    """``executed`` is True only for the one confirmation that ran the tool."""

    operation: OperationRecord
    executed: bool


class OperationConflict(Conflict):
    """The operation cannot be confirmed or cancelled as asked; the body carries it as it is."""

    def __init__(self, message: str, operation: OperationRecord, *, code: str) -> None:
        super().__init__(message, param="operation_id", code=code)
        self.operation = operation

    def to_body(self) -> dict[str, Any]:
        return super().to_body() | {"operation": operation_to_dict(self.operation)}


def check_end_user(op: OperationRecord, ctx: RunContext) -> None:
    """Only the end user an operation was requested for may confirm or cancel it (PermissionDenied,
    ``confirmation_not_yours``, otherwise).

    ``requested_by`` is the ``X-On-Behalf-Of`` of the request that created it. An operation created
    with no end user belongs to the organisation's key itself: only a request that names no end user
    decides it, so a request acting for someone cannot take it over. The other end user is not named
    in the message.
    """
    if (op.requested_by or None) == (ctx.on_behalf_of or None):
        return
    owner = "its own end user" if op.requested_by else "a request that names no end user (no X-On-Behalf-Of)"
    raise PermissionDenied(
        f"Operation {op.id} can only be confirmed or cancelled by {owner}; it stays pending.",
        param="X-On-Behalf-Of",
        code="confirmation_not_yours",
    )


async def record_decision(
    store: OperationStore, ctx: RunContext, action: str, op_id: str, *, via: str
) -> None:
    """An operation's confirmation or cancellation in the audit trail: the key, the end user, how."""
    if store.audit is None:
        return
    detail = {"end_user": ctx.on_behalf_of, "via": via}
    event = AuditEvent(
        org_id=ctx.org_id,
        actor=ctx.principal.actor,
        action=action,
        target=f"operation:{op_id}",
        request_id=request_id_of(ctx.request_headers),
        detail=detail,
    )
    await store.audit.record(event)


def execution_meta(op: OperationRecord) -> dict[str, Any]:
    """The ``_meta`` of the primary call: the operation id as idempotency key, workflow if any."""
    meta: dict[str, Any] = {"idempotency_key": op.id, OPERATION_META_KEY: op.id}
    execution = (op.policy or {}).get("execution") or {}
    if execution.get("mode") == "workflow":
        meta["io.hatchway/workflow"] = execution.get("workflow")
        if execution.get("version") is not None:
            meta["io.hatchway/workflow_version"] = execution["version"]
    return meta


async def confirm_operation(
    store: OperationStore,
    op_id: str,
    caller: McpToolCaller,
    ctx: RunContext,
    *,
    via: str,
    expected_digest: str | None = None,
    wait_seconds: float = 60.0,
) -> Confirmation:
    """Confirm ``op_id`` for ``ctx``'s organisation: execute it if this call wins the claim.

    Raises NotFound (another organisation's or unknown), PermissionDenied (another end user's),
    OperationConflict (expired, cancelled, digest mismatch). A confirmation that loses to a concurrent
    one returns the winner's outcome with ``executed=False``.
    """
    op = await store.get(op_id, org_id=ctx.org_id)
    check_end_user(op, ctx)
    check_confirmable(op, expected_digest)
    won = await store.claim(op.id, org_id=ctx.org_id, confirmed_by=ctx.on_behalf_of, via=via)
    if won:
        await record_decision(store, ctx, "operation.confirm", op.id, via=via)
        return Confirmation(await execute_claimed(store, op, caller, ctx), executed=True)
    current = await store.get(op.id, org_id=ctx.org_id)
    if current.state is S.EXECUTING:
        current = await store.wait_for_outcome(op.id, wait_seconds)
    if current.state.is_open or current.state is S.CANCELLED:
        check_confirmable(current, expected_digest)  # expired between our read and the claim
    return Confirmation(current, executed=False)


def check_confirmable(op: OperationRecord, expected_digest: str | None = None) -> None:
    """Raise OperationConflict if ``op`` cannot be confirmed (expired, cancelled, not pending yet,
    digest mismatch); executing or finished operations pass (their claim fails, the outcome is returned)."""
    if op.state is S.CANCELLED and op.status_reason == EXPIRED:
        raise OperationConflict(
            f"Operation {op.id} expired before it was confirmed.", op, code="operation_expired"
        )
    if op.state is S.CANCELLED:
        raise OperationConflict(f"Operation {op.id} was cancelled.", op, code="operation_cancelled")
    if op.state in (S.COLLECTING_PARAMETERS, S.PRE_VALIDATION):
        raise OperationConflict(
            f"Operation {op.id} is {op.status}: there is nothing to confirm yet.",
            op,
            code="operation_not_pending",
        )
    if op.state is not S.AWAITING_CONFIRMATION:
        return  # executing or finished: the claim fails and the existing outcome is returned
    if op.resolved_arguments is None or arguments_digest(op.resolved_arguments) != op.arguments_digest:
        raise OperationConflict(
            f"Operation {op.id}: the stored arguments do not match their digest; refusing to execute.",
            op,
            code="arguments_digest_mismatch",
        )
    if expected_digest is not None and expected_digest != op.arguments_digest:
        raise OperationConflict(
            f"Operation {op.id}: arguments_digest does not match the arguments awaiting confirmation.",
            op,
            code="arguments_digest_mismatch",
        )


async def execute_claimed(
    store: OperationStore, op: OperationRecord, caller: McpToolCaller, ctx: RunContext
) -> OperationRecord:
    """Call the primary tool once for an operation this process claimed; record the verdict.

    The call is at most once: a failure after the request may have reached the server is not
    retried and leaves the operation INTERRUPTED (outcome unknown); FAILED means it did not run.
    """
    arguments = op.resolved_arguments if op.resolved_arguments is not None else op.arguments
    heartbeat = asyncio.create_task(_renew_lease(store, op.id))
    try:
        result = await caller.call_mcp_tool(
            op.server, op.tool, arguments, ctx, meta=execution_meta(op), at_most_once=True
        )
    except (ToolTimeout, ToolOutcomeUnknown) as exc:
        await store.finish(op.id, S.INTERRUPTED, status_reason=_unknown(exc), error=_error(exc, ctx))
    except ToolError as exc:
        await store.finish(
            op.id, S.FAILED, status_reason="the tool could not be called", error=_error(exc, ctx)
        )
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.shield(
                store.finish(op.id, S.INTERRUPTED, status_reason="cancelled while executing")
            )
        raise
    else:
        await _record_result(store, op, result, ctx)
    finally:
        heartbeat.cancel()
    return await store.get(op.id)


async def _record_result(
    store: OperationStore, op: OperationRecord, result: McpCallResult, ctx: RunContext
) -> None:
    body = result.structured if result.structured is not None else result.text
    verdict = classify_results(body, op.tool, is_error=result.is_error)
    await store.finish(
        op.id,
        S.COMPLETED,
        verdict=ctx.redact_value({k: v for k, v in verdict.to_dict().items() if k != "items"}),
        items=ctx.redact_value([item.to_dict() for item in verdict.items]),
        result=sanitize_result(body, ctx),
    )


async def _renew_lease(store: OperationStore, op_id: str) -> None:
    interval = max(store.lease_seconds / 3, 0.2)
    while True:
        await asyncio.sleep(interval)
        with contextlib.suppress(Exception):
            await store.renew_lease(op_id)


def sanitize_result(body: Any, ctx: RunContext) -> Any:
    """The raw result as stored: secret values redacted, size capped.

    A structured body is redacted string by string, keys included, before anything serialises it:
    whatever a later serialisation escapes, its strings are already clean."""
    clean = ctx.redact_value(body)
    text = clean if isinstance(clean, str) else orjson.dumps(clean).decode()
    if len(text) > MAX_STORED_RESULT_CHARS:
        return {"truncated": True, "text": text[:MAX_STORED_RESULT_CHARS]}
    return clean


def _error(exc: ToolError, ctx: RunContext) -> dict[str, Any]:
    return {"code": exc.code, "message": ctx.redact(exc.message)}


def _unknown(exc: ToolError) -> str:
    cause = exc.cause if isinstance(exc, ToolOutcomeUnknown) else exc
    what = "no answer in time" if isinstance(cause, ToolTimeout) else "the call failed after it was sent"
    return f"{what} ({cause.code}): the server may or may not have acted; not re-run"


async def cancel_operation(
    store: OperationStore, op_id: str, ctx: RunContext, *, reason: str
) -> OperationRecord:
    """Cancel a pending operation of ``ctx``'s organisation; cancelling twice returns it as it is.

    Raises NotFound, or OperationConflict once it is executing or finished.
    """
    check_end_user(await store.get(op_id, org_id=ctx.org_id), ctx)
    if ctx.on_behalf_of:
        reason = f"{reason} (by {ctx.on_behalf_of})"
    if await store.cancel(op_id, reason, org_id=ctx.org_id):
        await record_decision(store, ctx, "operation.cancel", op_id, via=reason)
        return await store.get(op_id, org_id=ctx.org_id)
    op = await store.get(op_id, org_id=ctx.org_id)
    if op.state is S.CANCELLED:
        return op
    raise OperationConflict(
        f"Operation {op.id} is {op.status}: it can no longer be cancelled.",
        op,
        code="operation_not_cancellable",
    )
