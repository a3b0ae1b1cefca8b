"""The operation flow for one agent: requires → pre-validation → confirmation → execution → verdict.

``OperationService.call`` handles a model's call of one of the agent's tools and returns an
``OperationResult`` saying what happened — executed, needs the user's confirmation, missing
arguments, out of scope, failed. ``OperationService.reply`` reads the end user's next message as the
answer to the question it is bound to (``replies.py``). Both take the ``McpToolCaller`` of the run,
so the same code serves a chat turn, a Responses turn and ``POST /v1/operations/{id}/confirm``.

A toolset wraps it (``call_tool`` → ``call``; ``before_run`` → ``reply``); see the README section
"Transactional operations".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

import orjson

from hatchway.config.agent_files import AgentTools, ResolvedPolicy
from hatchway.config.agents import OperationSettings, PreValidation, ToolDefinition
from hatchway.engine.context import RunContext
from hatchway.engine.items import ToolSpec
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.approvals import (
    approval_for,
    approval_message,
    end_user_rule_applies,
    rule_variables,
)
from hatchway.engine.tools.operations.classify import classify_results
from hatchway.engine.tools.operations.confirmation import DEFAULT_VOCABULARY, normalize
from hatchway.engine.tools.operations.execution import execute_claimed
from hatchway.engine.tools.operations.messages import (
    missing_arguments_output,
    operation_output,
    repeat_note,
    write_confirmation_message,
)
from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus, arguments_digest
from hatchway.engine.tools.operations.prevalidation import ValidatorAnswer, run_validator
from hatchway.engine.tools.operations.replies import Replies, ReplyResult
from hatchway.engine.tools.operations.specs import tool_specs
from hatchway.engine.tools.operations.store import OperationDraft, OperationStore
from hatchway.engine.tools.operations.turns import Turn, turn_key
from hatchway.engine.tools.payloads import error_body, parse_arguments
from hatchway.errors import ToolError
from hatchway.store.columns import clean_json, clean_text

S = OperationStatus


class ResultKind(StrEnum):
    EXECUTED = "executed"
    """The tool ran (an operation COMPLETED, or a plain call); the output carries the verdict."""
    NEEDS_CONFIRMATION = "needs_confirmation"
    """Pause the loop and ask the user ``question``."""
    AWAITING_APPROVAL = "awaiting_approval"
    """Approvers other than the end user decide it (``approvals.py``); ``question`` tells the user."""
    MISSING_ARGUMENTS = "missing_arguments"
    OUT_OF_SCOPE = "out_of_scope"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    """Superseded by a newer request of the conversation before it could be asked."""
    INVALID = "invalid"


@dataclass(slots=True)
class OperationResult:
    """What one tool call produced; a toolset maps it to a ToolResult (and an Interruption)."""

    kind: ResultKind
    output: str
    """What the model reads."""
    is_error: bool = False
    question: str | None = None
    """For NEEDS_CONFIRMATION: the message the user answers."""
    operation: OperationRecord | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """For the run log: operation_id, status, verdict, multi_item."""


_STEP_OF_STATUS = {
    S.COMPLETED: ResultKind.EXECUTED,
    S.FAILED: ResultKind.FAILED,
    S.INTERRUPTED: ResultKind.INTERRUPTED,
    S.OUT_OF_SCOPE: ResultKind.OUT_OF_SCOPE,
    S.CANCELLED: ResultKind.CANCELLED,
    S.AWAITING_CONFIRMATION: ResultKind.NEEDS_CONFIRMATION,
    S.AWAITING_APPROVAL: ResultKind.AWAITING_APPROVAL,
    S.COLLECTING_PARAMETERS: ResultKind.MISSING_ARGUMENTS,
}


def missing_arguments(requires: tuple[str, ...], arguments: dict[str, Any]) -> list[str]:
    """Required arguments absent, null, blank or empty."""
    missing = []
    for name in requires:
        value = arguments.get(name)
        if value is None or (isinstance(value, str) and not value.strip()) or value in ([], {}):
            missing.append(name)
    return missing


class OperationService:
    """One agent's tools.yaml tools, run under their policies against a run's MCP caller."""

    def __init__(
        self,
        agent: str,
        tools: AgentTools,
        store: OperationStore,
        settings: OperationSettings | None = None,
    ) -> None:
        self.agent = agent
        self.tools = tools
        self.store = store
        self.settings = settings or OperationSettings()
        words = self.settings.confirmation_words
        self.vocabulary = DEFAULT_VOCABULARY.extended(yes=words.yes, no=words.no, filler=words.filler)
        self.replies = Replies(agent, store, self.settings, self.vocabulary)
        self.on_approval_requested: Callable[[OperationRecord], Awaitable[None]] | None = None
        """Told of each operation that starts waiting for approval (notifications)."""

    def tool_specs(self) -> list[ToolSpec]:
        """The enabled tools as the model sees them."""
        return tool_specs(self.tools)

    def handles(self, name: str) -> bool:
        return name in self.tools.enabled()

    def is_operation(self, name: str) -> bool:
        """Whether calls of ``name`` become durable operations (transactional or confirmed)."""
        return self.handles(name) and self.tools.policy(name).is_operation

    def server_of(self, name: str) -> str | None:
        """The MCP server id tools.yaml names for ``name``."""
        tool = self.tools.tools.get(name)
        return tool.mcp_server if tool is not None else None

    # -- a model's tool call ---------------------------------------------------------------------

    async def call(
        self,
        name: str,
        arguments: str | dict[str, Any],
        ctx: RunContext,
        caller: McpToolCaller,
        *,
        call_id: str | None = None,
        turn: str | None = None,
    ) -> OperationResult:
        """Run one call of tool ``name`` under its policy. ``turn``: the conversation's turn
        (``turns.conversation_turn``) under which a question asked now is filed."""
        tool = self.tools.enabled().get(name)
        if tool is None:
            return _error_result(ResultKind.INVALID, "unknown_tool", f"{name} is not a tool of this agent.")
        args = parse_arguments(arguments)
        if args is None:
            return _error_result(ResultKind.INVALID, "invalid_arguments", "Arguments must be a JSON object.")
        policy = self.tools.policy(name)
        if not policy.is_operation:
            return await self._run_direct(name, tool, policy, args, ctx, caller)
        op = await self.store.create(self._draft(name, tool, policy, args, ctx, call_id))
        if missing := missing_arguments(policy.requires, args):
            await self.store.transition(
                op.id,
                [S.COLLECTING_PARAMETERS],
                S.COLLECTING_PARAMETERS,
                status_reason="missing: " + ", ".join(missing),
            )
            return self._missing_result(name, tool, missing, await self.store.get(op.id))
        answer: ValidatorAnswer | None = None
        if policy.pre_validation is not None:
            if not await self.store.transition(op.id, [S.COLLECTING_PARAMETERS], S.PRE_VALIDATION):
                return await self._current_result(op.id)
            answer = await run_validator(caller, tool.mcp_server, policy.pre_validation.tool or "", args, ctx)
            if stop := await self._validator_stop(op, answer, policy.pre_validation):
                return stop
        return await self._after_validation(op, policy, answer, ctx, caller, turn)

    async def _validator_stop(
        self, op: OperationRecord, answer: ValidatorAnswer, rule: PreValidation
    ) -> OperationResult | None:
        if answer.failed and not rule.fail_open:
            await self.store.transition(
                op.id,
                [S.PRE_VALIDATION],
                S.FAILED,
                status_reason=answer.failure,
                pre_validation=answer.to_record(),
                error={"code": "validator_failed", "message": answer.failure},
            )
            return await self._current_result(op.id)
        if answer.failed:
            answer.fail_open_used = True  # continue with the original arguments
            return None
        if not answer.eligible:
            await self.store.transition(
                op.id,
                [S.PRE_VALIDATION],
                S.OUT_OF_SCOPE,
                status_reason=answer.reason or "the validator found nothing eligible",
                pre_validation=answer.to_record(),
            )
            return await self._current_result(op.id)
        return None

    async def _after_validation(
        self,
        op: OperationRecord,
        policy: ResolvedPolicy,
        answer: ValidatorAnswer | None,
        ctx: RunContext,
        caller: McpToolCaller,
        turn: str | None = None,
    ) -> OperationResult:
        """Freeze the (resolved) arguments, then ask the user or, without confirmation, execute."""
        usable = answer if answer is not None and not answer.failed else None
        # As stored (a NUL or a lone surrogate replaced), so the digest is that of what executes.
        resolved = clean_json((usable.resolved_arguments if usable else None) or op.arguments)
        target = (usable.target_tool if usable else None) or op.tool
        target_tool = self.tools.enabled().get(target)
        if target_tool is None:
            reason = f"the validator named {target!r}, which is not an enabled tool of this agent"
            await self.store.transition(
                op.id, [S.COLLECTING_PARAMETERS, S.PRE_VALIDATION], S.FAILED, status_reason=reason
            )
            return await self._current_result(op.id)
        frozen: dict[str, Any] = {
            "resolved_arguments": resolved,
            "arguments_digest": arguments_digest(resolved),
            "pre_validation": answer.to_record() if answer else None,
            "tool": target,
            "server": target_tool.mcp_server,
        }
        tainted_by = _untrusted_before(ctx)
        message = (usable.confirmation_message if usable else None) or write_confirmation_message(
            target, target_tool.description, resolved, answer
        )
        message = clean_text(message)
        variables = rule_variables(resolved, usable.items if usable else [], target, ctx)
        approval = approval_for(policy, variables, ctx)
        if approval is not None:
            return await self._await_approval(op, frozen, message, approval)
        repeats = await self._repeats(op, target, resolved, message)
        confirm = policy.require_confirmation or end_user_rule_applies(policy, variables)
        if not confirm and not tainted_by and repeats is None:
            return await self._execute_now(op, frozen, ctx, caller)
        if not confirm and tainted_by:  # asked because untrusted output came first
            message += (
                f"\n\n(Asked because this follows output of {', '.join(tainted_by)}, which this gateway "
                "treats as untrusted.)"
            )
        now = self.store.clock()
        if repeats is not None:
            frozen["repeat_of"] = repeats.id
            message += repeat_note(repeats, (now - (repeats.confirmed_at or now)).total_seconds())
        expires = now + timedelta(seconds=self.settings.confirmation_ttl_seconds)
        key = turn_key(op.org_id, self.agent, op.session_key, turn) if turn and op.session_key else None
        # Superseded meanwhile, the result says CANCELLED; otherwise it asks the user ``message``.
        await self.store.await_confirmation(
            op, confirmation_message=message, expires_at=expires, turn_key=key, **frozen
        )
        return await self._current_result(op.id)

    async def _await_approval(
        self, op: OperationRecord, frozen: dict[str, Any], message: str, approval: dict[str, Any]
    ) -> OperationResult:
        """Wait for the approvers the policy names (``approvals.py``); the requester is told so."""
        now = self.store.clock()
        expires = now + timedelta(seconds=float(approval["timeout_seconds"]))
        await self.store.await_approval(
            op,
            approval=approval,
            confirmation_message=message + approval_message(approval),
            expires_at=expires,
            **frozen,
        )
        current = await self.store.get(op.id)
        if current.state is S.AWAITING_APPROVAL and self.on_approval_requested is not None:
            await self.on_approval_requested(current)
        return result_of(current)

    async def _repeats(
        self, op: OperationRecord, tool: str, resolved: dict[str, Any], question: str
    ) -> OperationRecord | None:
        """The recent execution of the same conversation and end user that ``op`` would repeat
        (``operations.repeat_window_seconds``): the same tool with the same resolved arguments, lists
        in any order; or any operation whose question was the same words (so that no two questions
        of a conversation that a yes can tell apart only by when it came read alike)."""
        window = self.settings.repeat_window_seconds
        if window <= 0 or op.session_key is None:
            return None
        since = self.store.clock() - timedelta(seconds=window)
        digest = arguments_digest(_unordered(resolved))
        asked = normalize(question)
        for earlier in await self.store.recent_executions(op, since=since):
            earlier_args = earlier.resolved_arguments if earlier.resolved_arguments is not None else {}
            if earlier.tool == tool and arguments_digest(_unordered(earlier_args)) == digest:
                return earlier
            if earlier.confirmation_message is not None and normalize(earlier.confirmation_message) == asked:
                return earlier
        return None

    async def _execute_now(
        self, op: OperationRecord, frozen: dict[str, Any], ctx: RunContext, caller: McpToolCaller
    ) -> OperationResult:
        """A transactional tool that needs no confirmation: claimed and executed straight away."""
        claimed = await self.store.claim(
            op.id,
            from_states=(S.COLLECTING_PARAMETERS, S.PRE_VALIDATION),
            via="policy",
            confirmed_by=ctx.on_behalf_of,
            **frozen,
        )
        if not claimed:
            return await self._current_result(op.id)
        return result_of(await execute_claimed(self.store, await self.store.get(op.id), caller, ctx))

    async def _run_direct(
        self,
        name: str,
        tool: ToolDefinition,
        policy: ResolvedPolicy,
        args: dict[str, Any],
        ctx: RunContext,
        caller: McpToolCaller,
    ) -> OperationResult:
        """A read-only tool: requires and pre-validation apply, no durable record, output as sent."""
        if missing := missing_arguments(policy.requires, args):
            return self._missing_result(name, tool, missing, None)
        rule = policy.pre_validation
        if rule is not None:
            answer = await run_validator(caller, tool.mcp_server, rule.tool or "", args, ctx)
            if answer.failed and not rule.fail_open:
                return _error_result(
                    ResultKind.FAILED, "validator_failed", answer.failure or "validator failed"
                )
            if not answer.failed and not answer.eligible:
                return _error_result(ResultKind.OUT_OF_SCOPE, "out_of_scope", answer.reason or "not eligible")
            if not answer.failed and answer.resolved_arguments:
                args = answer.resolved_arguments
        try:
            result = await caller.call_mcp_tool(tool.mcp_server, name, args, ctx)
        except ToolError as exc:
            return _error_result(ResultKind.FAILED, exc.code or "tool_error", ctx.redact(exc.message))
        body = result.structured if result.structured is not None else result.text
        verdict = classify_results(body, name, is_error=result.is_error)
        return OperationResult(
            ResultKind.EXECUTED,
            ctx.redact(result.text),
            is_error=result.is_error,
            meta={"verdict": verdict.status.value, "multi_item": verdict.multi_item()},
        )

    # -- the user's reply ------------------------------------------------------------------------

    async def reply(self, turn: Turn | str, ctx: RunContext, caller: McpToolCaller) -> ReplyResult | None:
        """What the end user's new message does to the question it answers (``replies.py``); None:
        nothing, the model reads it. A plain string is a bare reply: no conversation around it."""
        return await self.replies.read(Turn.bare(turn) if isinstance(turn, str) else turn, ctx, caller)

    def wait_seconds(self, ctx: RunContext) -> float:
        """How long a duplicate confirmation waits for an executing operation's outcome."""
        return self.replies.wait_seconds(ctx)

    # -- internals -------------------------------------------------------------------------------

    def _draft(
        self,
        name: str,
        tool: ToolDefinition,
        policy: ResolvedPolicy,
        args: dict[str, Any],
        ctx: RunContext,
        call_id: str | None,
    ) -> OperationDraft:
        return OperationDraft(
            org_id=ctx.org_id,
            agent=self.agent,
            session_key=ctx.session_key,
            tool=name,
            server=tool.mcp_server,
            operation_type=policy.operation_type.value,
            policy=policy_snapshot(policy),
            arguments=args,
            ttl_seconds=self.settings.confirmation_ttl_seconds,
            call_id=call_id,
            response_id=ctx.response_id,
            requested_by=ctx.on_behalf_of,
        )

    def _missing_result(
        self, name: str, tool: ToolDefinition, missing: list[str], op: OperationRecord | None
    ) -> OperationResult:
        labels = {m: tool.args_schema[m].label or "" for m in missing if m in tool.args_schema}
        output = missing_arguments_output(name, missing, labels, tool.user_prompt)
        meta = _meta(op) if op else {}
        return OperationResult(
            ResultKind.MISSING_ARGUMENTS,
            output,
            is_error=True,
            operation=op,
            meta=meta | {"missing": missing},
        )

    async def _current_result(self, op_id: str) -> OperationResult:
        return result_of(await self.store.get(op_id))


def result_of(op: OperationRecord) -> OperationResult:
    """What an operation's current state means for the model."""
    kind = _STEP_OF_STATUS.get(op.state, ResultKind.FAILED)
    failed = kind in (
        ResultKind.FAILED,
        ResultKind.OUT_OF_SCOPE,
        ResultKind.CANCELLED,
        ResultKind.INTERRUPTED,
    )
    asks = kind in (ResultKind.NEEDS_CONFIRMATION, ResultKind.AWAITING_APPROVAL)
    question = op.confirmation_message if asks else None
    return OperationResult(
        kind, operation_output(op), is_error=failed, question=question, operation=op, meta=_meta(op)
    )


def policy_snapshot(policy: ResolvedPolicy) -> dict[str, Any]:
    """The policy as recorded on the operation (it stays true even if the files change later)."""
    return {
        "source": policy.source,
        "operation_type": policy.operation_type.value,
        "require_confirmation": policy.require_confirmation,
        "requires": list(policy.requires),
        "pre_validation": policy.pre_validation.model_dump() if policy.pre_validation else None,
        "execution": policy.execution.model_dump() if policy.execution else None,
        "requested_tool": policy.tool,
    }


def _meta(op: OperationRecord) -> dict[str, Any]:
    meta: dict[str, Any] = {"operation_id": op.id, "operation_status": op.status}
    if op.verdict:
        status = op.verdict.get("status")
        if status is not None:  # the call's outcome on an MCP endpoint (the loop's is the result's kind)
            meta["outcome"] = Outcome(status)
        meta["multi_item"] = op.verdict.get("multi_item")
    return meta


def _error_result(kind: ResultKind, code: str, message: str) -> OperationResult:
    return OperationResult(
        kind, error_body(code, message), is_error=True, meta={"outcome": Outcome.ERROR, "error_code": code}
    )


def _unordered(value: Any) -> Any:
    """``value`` with every list sorted: arguments that name the same items in another order."""
    if isinstance(value, dict):
        return {k: _unordered(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted(
            (_unordered(v) for v in value), key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS)
        )
    return value


def _untrusted_before(ctx: RunContext) -> list[str]:
    """The tools whose output entered a guarded run before this call, when that makes a
    transactional tool ask the end user (``guards.confirm_when_tainted``, a guard's ``confirm``)."""
    root = ctx.run.root
    if root.confirm_always or (root.confirm_when_tainted and root.tainted_by):
        return root.tainted_by[-3:] or ["a tool"]
    return []
