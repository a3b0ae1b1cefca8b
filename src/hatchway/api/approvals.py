"""``/v1/approvals``: the approvers' inbox and their decisions (the dashboard's Approvals page, and
any tool an approver's team builds).

A decision needs a verified person (``Approver.of``): a session signed in with SSO (the dashboard,
with its CSRF token), or a key with the approver's verified user token (``access.end_users``).
``X-On-Behalf-Of`` is never proof. An approval names the ``arguments_digest`` it approves; one made
on other arguments is refused and never counts (``engine/tools/operations/approvals.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.engine.tools.operations.approvals import (
    MAX_COMMENT_CHARS,
    Approver,
    approvers_now,
    describe,
    why_not_eligible,
)
from hatchway.engine.tools.operations.models import OperationApproval, OperationRecord, OperationStatus
from hatchway.errors import NotFound, PermissionDenied
from hatchway.gateway import Gateway
from hatchway.principal import Principal, Role

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])
S = OperationStatus
_SCAN = 200
"""Operations read at a time while an ``app`` key's inbox looks for those its person decides."""
_MAX_SCANS = 25


class Decision(BaseModel):
    """``POST /v1/approvals/{operation_id}/approve`` or ``…/reject``."""

    model_config = ConfigDict(extra="forbid")
    arguments_digest: Annotated[str | None, Field(max_length=64)] = None
    """The digest of the arguments decided on (as the inbox shows it); required to approve."""
    comment: Annotated[str | None, Field(max_length=MAX_COMMENT_CHARS)] = None


def _approver_or_none(principal: Principal) -> Approver | None:
    """The verified person behind ``principal``, or None (a key alone reads, but decides nothing)."""
    try:
        return Approver.of(principal)
    except PermissionDenied:
        return None


def approval_view(
    op: OperationRecord, decisions: list[OperationApproval], approver: Approver | None
) -> dict[str, Any]:
    """An operation as its approvers see it: what it does, who asked, the run that led there, the
    decisions so far and whether the caller may decide it."""
    approval = op.approval or {}
    stage = int(approval.get("stage", 0))
    counted = [
        d
        for d in decisions
        if d.decision == "approve" and d.stage == stage and d.arguments_digest == op.arguments_digest
    ]
    awaiting = op.state is S.AWAITING_APPROVAL
    why_not = why_not_eligible(op, approver) if approver is not None else "you are not a verified person"
    validator = op.pre_validation or {}
    view: dict[str, Any] = {
        "id": op.id,
        "object": "approval",
        "status": op.status,
        "status_reason": op.status_reason,
        "agent": op.agent,
        "tool": op.tool,
        "requested_by": op.requested_by,
        "created_at": _iso(op.created_at),
        "expires_at": _iso(op.expires_at),
        "question": op.confirmation_message,
        "arguments": op.resolved_arguments if op.resolved_arguments is not None else op.arguments,
        "arguments_digest": op.arguments_digest,
        "items": validator.get("items") or [],
        "approval": {
            "rule": approval.get("rule"),
            "source": approval.get("source"),
            "condition": approval.get("condition"),
            "approvers": approvers_now(approval),
            "approvers_label": describe(approvers_now(approval)),
            "required": approval.get("required", 1),
            "stage": stage,
            "escalated": stage > 0,
            "on_timeout": approval.get("on_timeout"),
            "approvals_counted": len({d.approver for d in counted}),
        },
        "decisions": [
            {
                "approver": d.approver,
                "decision": d.decision,
                "comment": d.comment,
                "via": d.via,
                "stage": d.stage,
                "counts": d in counted,
                "decided_at": _iso(d.decided_at),
            }
            for d in decisions
        ],
        "run": {
            "response_id": op.response_id,
            "session_key": op.session_key,
            "call_id": op.call_id,
            "tainted": bool(approval.get("tainted_by")),
            "tainted_by": approval.get("tainted_by") or [],
        },
        "can_decide": awaiting and why_not is None,
        "why_not": None if not awaiting else why_not,
    }
    if not awaiting:
        view["outcome"] = {
            "status": op.status,
            "verdict": (op.verdict or {}).get("status"),
            "results": op.items or [],
            "approved_by": op.confirmed_by if op.confirmed_via == "approval" else None,
        }
    return view


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


@router.get("")
async def inbox(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    after: Annotated[str | None, Query(max_length=40)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """The organisation's operations awaiting approval, newest first; an ``app`` key (an application
    acting for a person) sees only those its verified person may decide."""
    gw = gateway_of(request)
    await gw.approvals.expire(org_id=principal.org_id)
    approver = _approver_or_none(principal)
    page, cursor = await _awaiting(gw, principal, approver, after, limit)
    decisions = await gw.approvals.records.decisions([op.id for op in page])
    by_op: dict[str, list[OperationApproval]] = {}
    for d in decisions:
        by_op.setdefault(d.operation_id, []).append(d)
    return {
        "object": "list",
        "data": [approval_view(op, by_op.get(op.id, []), approver) for op in page],
        "has_more": cursor is not None,
        "last_id": cursor if cursor is not None else (page[-1].id if page else None),
    }


async def _awaiting(
    gw: Gateway, principal: Principal, approver: Approver | None, after: str | None, limit: int
) -> tuple[list[OperationRecord], str | None]:
    """A page of the operations awaiting approval after ``after``, newest first, and the cursor of the
    next page (None: no more). An ``app`` key sees only those its verified person may decide, read
    ``_SCAN`` at a time, at most ``_MAX_SCANS`` reads per page (then the page may be short)."""
    if principal.role is not Role.APP:
        rows = await gw.approvals.records.awaiting_approval(principal.org_id, after=after, limit=limit + 1)
        page = rows[:limit]
        return page, page[-1].id if len(rows) > limit else None
    if approver is None:
        return [], None
    found: list[OperationRecord] = []
    for _ in range(_MAX_SCANS):
        rows = await gw.approvals.records.awaiting_approval(principal.org_id, after=after, limit=_SCAN)
        for op in rows:
            if why_not_eligible(op, approver) is None:
                if len(found) == limit:
                    return found, found[-1].id
                found.append(op)
            after = op.id
        if len(rows) < _SCAN:
            return found, None
    return found, after


async def _view(request: Request, principal: Principal, operation_id: str) -> dict[str, Any]:
    gw = gateway_of(request)
    op = await gw.operations.get(operation_id, org_id=principal.org_id)
    approver = _approver_or_none(principal)
    if op.approval is None or (
        principal.role is Role.APP
        and (
            approver is None
            or (why_not_eligible(op, approver) is not None and op.requested_by != approver.subject)
        )
    ):
        # Not an approval, or an app key's person who neither decides nor asked for it: as if absent.
        raise NotFound(f"No approval '{operation_id}' in this organisation.", param="operation_id")
    view = approval_view(op, await gw.approvals.records.decisions([op.id]), approver)
    if principal.role is not Role.APP:  # the delivery log is the organisation's, not an app's
        view["notifications"] = await gw.approval_notifier.deliveries(op.org_id, op.id)
    return view


@router.get("/{operation_id}")
async def get_approval(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    return await _view(request, principal, operation_id)


async def _decide(
    request: Request, principal: Principal, operation_id: str, *, approve: bool
) -> dict[str, Any]:
    gw = gateway_of(request)
    raw = await request.body()
    body = validate_body(Decision, parse_json_body(raw) if raw.strip() else {})
    approver = Approver.of(principal)
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    await gw.approvals.decide(
        operation_id,
        approver,
        approve=approve,
        digest=body.arguments_digest,
        comment=body.comment,
        ctx=ctx,
    )
    return await _view(request, principal, operation_id)


@router.post("/{operation_id}/approve")
async def approve(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    """Approve; when this approval satisfies the policy, the operation executes now, once."""
    return await _decide(request, principal, operation_id, approve=True)


@router.post("/{operation_id}/reject")
async def reject(
    request: Request, operation_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    """Reject: the operation is cancelled, nothing runs."""
    return await _decide(request, principal, operation_id, approve=False)
