"""``/v1/operations``: the organisation's transactional operations, confirmed or cancelled by id.

Confirming executes the operation through the MCP servers of its agent (``Planner.operation_caller``)
exactly once; a confirmation that finds it confirmed already gets 409 with its outcome — waited for
while it executes (``operations.duplicate_wait_seconds``) — so a double click or a client retry never
runs it again.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hatchway.access.roles import narrows_to_end_user
from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.api.errors import parse_json_body
from hatchway.engine.tools.operations.execution import (
    OperationConflict,
    cancel_operation,
    check_confirmable,
    check_end_user,
    confirm_operation,
)
from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus, operation_to_dict
from hatchway.engine.tools.operations.store import OperationQuery
from hatchway.errors import InvalidRequest, NotFound
from hatchway.principal import Principal

router = APIRouter()
_STATUSES = ", ".join(s.value for s in OperationStatus)
_STATUS_ENUM: dict[str, Any] = {"enum": [s.value for s in OperationStatus]}


def _status(value: str | None) -> OperationStatus | None:
    if value is None:
        return None
    try:
        return OperationStatus(value.upper())
    except ValueError:
        raise InvalidRequest(f"status: must be one of {_STATUSES} (got {value!r})", param="status") from None


@router.get("/v1/operations")
async def list_operations(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    status: Annotated[str | None, Query(json_schema_extra=_STATUS_ENUM)] = None,
    agent: str | None = None,
    session: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    ctx = run_context(request, principal, 0)
    query = OperationQuery(
        status=_status(status),
        agent=agent,
        session_key=session,
        after=after,
        limit=limit + 1,
        end_user_only=narrows_to_end_user(principal),
        end_user=ctx.on_behalf_of,
    )
    rows = await gateway_of(request).operations.list(principal.org_id, query)
    page = rows[:limit]
    return {
        "object": "list",
        "data": [operation_to_dict(r) for r in page],
        "has_more": len(rows) > limit,
        "last_id": page[-1].id if page else None,
    }


@router.get("/v1/operations/{operation_id}")
async def get_operation(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    op = await gateway_of(request).operations.get(operation_id, org_id=principal.org_id)
    if (
        narrows_to_end_user(principal)
        and (op.requested_by or None) != run_context(request, principal, 0).on_behalf_of
    ):
        # Another end user's: as if it did not exist (an app key reads its own end user's only).
        raise NotFound(f"No operation '{operation_id}' in this organisation.", param="operation_id")
    return operation_to_dict(op)


def _confirm_body(raw: bytes) -> str | None:
    """The optional body ``{"confirm": true, "arguments_digest": "…"}``; returns the digest."""
    if not raw.strip():
        return None
    body = parse_json_body(raw)
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    unknown = sorted(set(body) - {"confirm", "arguments_digest"})
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: unknown field", param=unknown[0])
    if "confirm" in body and body["confirm"] is not True:
        raise InvalidRequest(f"confirm: must be the boolean true (got {body['confirm']!r})", param="confirm")
    digest = body.get("arguments_digest")
    if digest is not None and not isinstance(digest, str):
        raise InvalidRequest("arguments_digest: must be a string", param="arguments_digest")
    return digest


@router.post("/v1/operations/{operation_id}/confirm")
async def confirm(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    gw = gateway_of(request)
    digest = _confirm_body(await request.body())
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    op = await gw.operations.get(operation_id, org_id=principal.org_id)
    check_end_user(op, ctx)
    check_confirmable(op, digest)
    wait = max(min(gw.settings.operations.duplicate_wait_seconds, ctx.remaining()), 0.0)
    if op.state is OperationStatus.EXECUTING:  # confirmed already (a retry, a double click): its outcome
        op = await gw.operations.wait_for_outcome(op.id, wait)
    if op.state is not OperationStatus.AWAITING_CONFIRMATION:
        raise OperationConflict(
            f"Operation {op.id} is {op.status}: it can no longer be confirmed and is not executed again.",
            op,
            code="operation_not_pending",
        )
    caller = await gw.planner.operation_caller(op.agent, ctx)
    confirmation = await confirm_operation(
        gw.operations, op.id, caller, ctx, via="api", expected_digest=digest, wait_seconds=wait
    )
    if not confirmation.executed:
        raise _already_confirmed(confirmation.operation)
    return operation_to_dict(confirmation.operation)


def _already_confirmed(op: OperationRecord) -> OperationConflict:
    """409 for a confirmation that finds the operation confirmed already, with its outcome (or, past
    the wait, the operation still executing)."""
    ran = (
        "is executing (once)"
        if op.state is OperationStatus.EXECUTING
        else f"executed once and is {op.status}"
    )
    return OperationConflict(
        f"Operation {op.id} was confirmed already; it {ran}.", op, code="operation_already_confirmed"
    )


@router.post("/v1/operations/{operation_id}/cancel")
async def cancel(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    gw = gateway_of(request)
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    op = await cancel_operation(gw.operations, operation_id, ctx, reason="cancelled through the API")
    return operation_to_dict(op)
