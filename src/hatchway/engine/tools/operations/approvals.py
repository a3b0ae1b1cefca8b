"""Approvals beyond the end user: who must approve an operation, and deciding it once, anywhere.

A tool's ``approvals`` in tool_policies.yaml are rules; when the operation is frozen (its arguments
resolved, ``service.py``) the first rule whose CEL ``when`` holds (``config/conditions.py``) decides
who approves — a group or a role of the organisation, N of them, not the requester — and its
snapshot is stored on the operation (``OperationRecord.approval``), which waits in AWAITING_APPROVAL.
A tainted run whose guards say ``confirm_when_tainted: {group: …}`` routes the same way.

A decision (``ApprovalDesk.decide``) comes from a verified person only — an SSO session, or a key with
a verified user token — never from the model, a tool or ``X-On-Behalf-Of``. It is a row bound to the
operation's arguments digest and stage (sending it twice is one decision; a decision on other
arguments does not count). After writing its row, each approval counts the approvals in a new
transaction, so of two concurrent approvals the later to commit sees both; the one that finds the
policy satisfied claims the operation (compare-and-set on its status, digest and version) and
executes it, exactly once, from whichever replica. A rejection cancels it. ``expire`` applies the
rules' timeouts: cancel, or escalate once to ``escalate_to``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hatchway.access.gatekeeper import request_id_of
from hatchway.audit import AuditEvent
from hatchway.config.agent_files import ResolvedPolicy
from hatchway.config.agents import ApprovalRule
from hatchway.config.conditions import evaluate
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.approval_store import ApprovalRecords
from hatchway.engine.tools.operations.execution import OperationConflict, execute_claimed
from hatchway.engine.tools.operations.models import (
    OperationApproval,
    OperationRecord,
    OperationStatus,
    arguments_digest,
)
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.errors import InvalidRequest, NotFound, PermissionDenied
from hatchway.principal import Principal, Role

logger = logging.getLogger(__name__)
S = OperationStatus
MAX_COMMENT_CHARS = 2000
MAX_AUDIT_COMMENT = 500
"""Characters of a comment the audit entry keeps (the decision's row keeps it whole)."""
_ROLE_RANK = {Role.APP: 1, Role.ADMIN: 2, Role.PLATFORM: 3}
"""Who a ``role:`` rule admits: that role or a broader one. A viewer approves nothing."""
TIMED_OUT = "approval timed out: no decision before expires_at; nothing was executed"


class Notifier(Protocol):
    """Where approval events go (``notifications.ApprovalNotifier``)."""

    async def announce(
        self, op: OperationRecord, event: str, *, org_name: str | None = None, collected: int = 0
    ) -> int: ...


@dataclass(frozen=True, slots=True)
class Approver:
    """A verified person deciding an approval, and the credential they came with."""

    subject: str
    groups: frozenset[str]
    role: Role
    via: str
    """``sso`` (a signed-in session) or ``token`` (a key with a verified user token)."""
    actor: str
    principal: Principal

    @classmethod
    def of(cls, principal: Principal) -> Approver:
        """The person behind ``principal``; PermissionDenied when it is not a verified person (a key
        alone, or a key naming someone in ``X-On-Behalf-Of`` only)."""
        if principal.subject is not None:
            subject, via = principal.subject, "sso"
        elif principal.end_user is not None:
            subject, via = principal.end_user, "token"
        else:
            raise PermissionDenied(
                "Approvals are decided by a verified person: sign in to the dashboard, or send the "
                "approver's user token (access.end_users) with the key. X-On-Behalf-Of is not proof.",
                code="approver_not_verified",
            )
        return cls(subject, frozenset(principal.groups), principal.role, via, principal.actor, principal)


def rule_variables(arguments: dict[str, Any], items: list[Any], tool: str, ctx: RunContext) -> dict[str, Any]:
    """What a rule's ``when`` reads (``config/conditions.VARIABLES``)."""
    tainted_by = list(ctx.run.root.tainted_by)
    return {
        "arguments": arguments,
        "items": items,
        "tool": tool,
        "tainted": bool(tainted_by),
        "tainted_by": tainted_by,
        "requester": ctx.on_behalf_of or "",
    }


def _chosen(policy: ResolvedPolicy, variables: dict[str, Any]) -> tuple[int, ApprovalRule] | None:
    """The first rule that holds. A condition that cannot be evaluated (the model may send anything)
    never makes the call lighter: a rule naming approvers then holds, one naming the end user does not."""
    for index, rule in enumerate(policy.approvals):
        value = True if rule.when is None else evaluate(rule.when, variables)
        if value is True or (value is None and not rule.approvers.end_user):
            return index, rule
    return None


def approval_for(policy: ResolvedPolicy, variables: dict[str, Any], ctx: RunContext) -> dict[str, Any] | None:
    """The approval an operation waits for (its snapshot), or None when its end user confirms."""
    root = ctx.run.root
    chosen = _chosen(policy, variables)
    tainted = bool(root.tainted_by)
    tainted_route = root.tainted_approvers if tainted else None
    if chosen is not None and not chosen[1].approvers.end_user:
        index, rule = chosen
        return {
            "rule": rule.name or f"rule-{index}",
            "source": "tool_policies.yaml",
            "condition": rule.when,
            "approvers": rule.approvers.model_dump(exclude_none=True),
            "required": rule.required,
            # After untrusted output the requester may be the one it steers: never theirs to approve.
            "exclude_requester": rule.exclude_requester or tainted,
            "stage": 0,
            "timeout_seconds": rule.timeout_seconds,
            "on_timeout": rule.on_timeout,
            "escalate_to": rule.escalate_to.model_dump(exclude_none=True) if rule.escalate_to else None,
            "escalation_timeout_seconds": rule.escalation_timeout_seconds or rule.timeout_seconds,
            "notify": list(rule.notify),
            "tainted_by": list(root.tainted_by[-5:]),
        }
    if tainted_route is not None:  # the end user may be the one the injected text steers
        return {
            "rule": "tainted",
            "source": "guards.confirm_when_tainted",
            "condition": None,
            "approvers": dict(tainted_route),
            "required": 1,
            "exclude_requester": True,
            "stage": 0,
            "timeout_seconds": 86400.0,
            "on_timeout": "cancel",
            "escalate_to": None,
            "escalation_timeout_seconds": None,
            "notify": [],
            "tainted_by": list(root.tainted_by[-5:]),
        }
    return None


def end_user_rule_applies(policy: ResolvedPolicy, variables: dict[str, Any]) -> bool:
    """Whether the first rule that holds names the end user (it confirms even when the policy's
    ``require_confirmation`` is false)."""
    chosen = _chosen(policy, variables)
    return chosen is not None and bool(chosen[1].approvers.end_user)


def approvers_now(approval: dict[str, Any]) -> dict[str, Any]:
    """The approvers of the approval's current stage (the escalation's, once escalated)."""
    if approval.get("stage", 0) >= 1 and approval.get("escalate_to"):
        return dict(approval["escalate_to"])
    return dict(approval.get("approvers") or {})


def describe(approvers: dict[str, Any]) -> str:
    if "group" in approvers:
        return f"group {approvers['group']}"
    if "role" in approvers:
        return f"role {approvers['role']}"
    return "the end user"


def why_not_eligible(op: OperationRecord, approver: Approver) -> str | None:
    """Why ``approver`` may not decide ``op`` (None: they may)."""
    approval = op.approval or {}
    if approver.principal.org_id != op.org_id:
        return "another organisation's operation"
    if approver.role is Role.VIEWER:
        return "a viewer decides nothing"
    if (
        approval.get("exclude_requester", True)
        and op.requested_by is not None
        and approver.subject == op.requested_by
    ):
        return "the requester cannot approve their own operation"
    wanted = approvers_now(approval)
    if "group" in wanted and wanted["group"] not in approver.groups:
        return f"only members of group {wanted['group']} decide it"
    if "role" in wanted and approver.via != "sso":
        # A key's role is not its holder's: only a signed-in person's own role in the organisation
        # (mapped from their groups at sign-in) says who they are.
        return f"a role ({wanted['role']}) is proven by signing in to the dashboard, not by a key"
    if "role" in wanted and _ROLE_RANK.get(approver.role, 0) < _ROLE_RANK.get(Role(wanted["role"]), 99):
        return f"only a person with role {wanted['role']} (or broader) decides it"
    if not wanted:
        return "its policy names no approver"
    return None


def approval_message(approval: dict[str, Any]) -> str:
    """What the requester is told while it waits."""
    required = approval.get("required", 1)
    who = describe(approvers_now(approval))
    count = "an approver" if required == 1 else f"{required} distinct approvers"
    return (
        f"\n\nThis needs approval before it runs: {count} of {who}. Nothing has been executed; "
        "the outcome will follow once it is decided."
    )


CallerFor = Callable[[OperationRecord, RunContext], Awaitable[McpToolCaller]]


class ApprovalDesk:
    """Decides approvals against the operation store; executes an operation once it is approved."""

    def __init__(
        self,
        store: OperationStore,
        *,
        caller_for: CallerFor,
        notifier: Notifier | None = None,
        org_names: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> None:
        self.store = store
        self.records = ApprovalRecords(store)
        self.caller_for = caller_for
        self.notifier = notifier
        self.org_names = org_names

    async def decide(
        self,
        op_id: str,
        approver: Approver,
        *,
        approve: bool,
        digest: str | None,
        comment: str | None,
        ctx: RunContext,
    ) -> tuple[OperationRecord, bool]:
        """Record ``approver``'s decision on ``op_id``; the operation as it stands and whether this
        decision was recorded now (False: the same decision was recorded before).

        NotFound (another organisation's), PermissionDenied (not eligible), OperationConflict (not
        awaiting approval, or ``digest`` is not the operation's current arguments digest)."""
        if comment is not None and len(comment) > MAX_COMMENT_CHARS:
            raise InvalidRequest(f"comment: at most {MAX_COMMENT_CHARS} characters", param="comment")
        await self.expire(org_id=approver.principal.org_id)
        op = await self.store.get(op_id, org_id=approver.principal.org_id)
        if op.approval is None:
            raise NotFound(f"No approval '{op_id}' in this organisation.", param="operation_id")
        if reason := why_not_eligible(op, approver):
            if approver.role is Role.APP and op.requested_by != approver.subject:
                # An application's person who neither decides it nor asked for it: as if absent.
                raise NotFound(f"No approval '{op_id}' in this organisation.", param="operation_id")
            raise PermissionDenied(
                f"You may not decide operation {op.id}: {reason}.",
                param="operation_id",
                code="not_an_approver",
            )
        if op.state is not S.AWAITING_APPROVAL:
            raise _not_awaiting(op)
        _check_digest(op, digest, required=approve)
        row = OperationApproval(
            operation_id=op.id,
            approver=approver.subject,
            stage=int((op.approval or {}).get("stage", 0)),
            arguments_digest=op.arguments_digest or "",
            org_id=op.org_id,
            decision="approve" if approve else "reject",
            comment=comment,
            via=approver.via,
            actor=approver.actor,
            decided_at=self.store.clock(),
        )
        if not approve:
            # Only while it still awaits approval as read (same stage, same arguments): a rejection
            # that loses to an execution, an escalation or a timeout is refused, not recorded.
            reason = f"rejected by {approver.subject}" + (f": {comment}" if comment else "")
            if not await self.records.reject(op, reason[:1000]):
                raise _not_awaiting(await self.store.get(op.id))
        recorded = await self.records.add_decision(row)
        if recorded:
            await self._audit(op, approver, row, ctx)
        if not approve:
            current = await self.store.get(op.id)
            await self._announce(current, "approval.decided")
            return current, recorded
        return await self._execute_if_satisfied(op.id, ctx), recorded

    async def _execute_if_satisfied(self, op_id: str, ctx: RunContext) -> OperationRecord:
        """Count the approvals that still count (this stage, these arguments); the call that finds
        enough claims the operation and executes it."""
        op = await self.store.get(op_id)
        if op.state is not S.AWAITING_APPROVAL:
            return op
        approval = op.approval or {}
        approvers = await self.records.approvers_of(
            op.id, stage=int(approval.get("stage", 0)), digest=op.arguments_digest or ""
        )
        if len(approvers) < int(approval.get("required", 1)):
            return op
        if op.resolved_arguments is None or arguments_digest(op.resolved_arguments) != op.arguments_digest:
            raise OperationConflict(
                f"Operation {op.id}: the stored arguments do not match their digest; refusing to execute.",
                op,
                code="arguments_digest_mismatch",
            )
        run_ctx = _requester_context(op, ctx)
        caller = await self.caller_for(op, run_ctx)
        won = await self.store.claim(
            op.id,
            from_states=(S.AWAITING_APPROVAL,),
            confirmed_by=",".join(sorted(approvers))[:256],
            via="approval",
            org_id=op.org_id,
            expected_digest=op.arguments_digest,
            expected_version=op.updated_at,
        )
        if not won:
            return await self.store.get(op.id)
        done = await execute_claimed(self.store, op, caller, run_ctx)
        await self._announce(done, "approval.decided")
        return done

    async def expire(self, *, org_id: str | None = None) -> None:
        """Apply the timeouts of approvals past their deadline: escalate once, or cancel."""
        for op, event in await self.records.expire_approvals(TIMED_OUT, org_id=org_id):
            await self._announce(op, event)

    async def announce_requested(self, op: OperationRecord) -> None:
        await self._announce(op, "approval.requested")

    async def keep_expiring(self, interval: float) -> None:
        """Each replica applies the timeouts every ``interval`` seconds (any replica may: each change
        is a compare-and-set)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire()
            except Exception:
                logger.exception("applying approval timeouts failed; retried in %.0f s", interval)

    async def _announce(self, op: OperationRecord, event: str) -> None:
        if self.notifier is None:
            return
        try:
            name = await self.org_names(op.org_id) if self.org_names is not None else None
            stage = int((op.approval or {}).get("stage", 0))
            collected = len(
                await self.records.approvers_of(op.id, stage=stage, digest=op.arguments_digest or "")
            )
            await self.notifier.announce(op, event, org_name=name, collected=collected)
        except Exception:  # a notification is never worth failing the decision over
            logger.exception("could not queue the %s notification of operation %s", event, op.id)

    async def _audit(
        self, op: OperationRecord, approver: Approver, row: OperationApproval, ctx: RunContext
    ) -> None:
        if self.store.audit is None:
            return
        await self.store.audit.record(
            AuditEvent(
                org_id=op.org_id,
                actor=approver.actor,
                action=f"operation.{row.decision}",
                target=f"operation:{op.id}",
                request_id=request_id_of(ctx.request_headers),
                detail={
                    "approver": approver.subject,
                    "via": approver.via,
                    "stage": row.stage,
                    "arguments_digest": row.arguments_digest,
                    "rule": (op.approval or {}).get("rule"),
                    # Capped: the trail keeps an entry's detail under 8 KiB, and who decided must stay.
                    "comment": row.comment[:MAX_AUDIT_COMMENT] if row.comment else None,
                },
            )
        )


def _not_awaiting(op: OperationRecord) -> OperationConflict:
    return OperationConflict(
        f"Operation {op.id} is {op.status}: it does not await approval.",
        op,
        code="operation_not_awaiting_approval",
    )


def _check_digest(op: OperationRecord, digest: str | None, *, required: bool) -> None:
    if digest is None and not required:
        return  # a rejection of whatever is pending needs no digest
    if digest is None:
        raise InvalidRequest(
            "arguments_digest: required — the digest of the arguments you approve (the inbox shows it)",
            param="arguments_digest",
        )
    if digest != op.arguments_digest:
        raise OperationConflict(
            f"Operation {op.id}: arguments_digest does not match the arguments awaiting approval "
            "(they changed since you read them); nothing was recorded.",
            op,
            code="arguments_digest_mismatch",
        )


def _requester_context(op: OperationRecord, ctx: RunContext) -> RunContext:
    """The context an approved operation executes in: the requester's end user (their per-user
    credentials), the operation's conversation; none of the approver's request headers."""
    return RunContext(
        principal=ctx.principal,
        request_headers={},
        on_behalf_of=op.requested_by,
        session_key=op.session_key,
        deadline=ctx.deadline,
        response_id=op.response_id,
        secrets=ctx.secrets,
    )
