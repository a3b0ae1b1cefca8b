"""An agent's tools.yaml tools as a toolset of the loop: policies on every call, the user's reply first.

``call_tool`` runs a model's call through ``OperationService.call``; a call that needs the user's
confirmation pauses the loop with an ``Interruption`` whose message is the confirmation question,
filed under the conversation's turn. ``before_run`` reads the end user's new message — and only
that — as the answer to the question it is bound to (``turns.py``; ``OperationService.reply``):

- bound to no question and nothing pending, or a message that is not the user's: nothing happens;
- yes / no / expired for a pending question: the operation (executed, cancelled or expired) is put
  before the model as a call and its per-item output, and the model reports it;
- a yes to a question decided already (a double click, a client's retry, a second tab, the confirm
  endpoint first): the gateway answers with that operation's outcome, waiting for it while it
  executes; the model is not called, so it cannot call the tool again;
- ambiguous: the same question is asked again and the model is not called. While an operation
  awaits confirmation, the last thing the user sees is therefore always its question. To ask for
  something else the user says no first, alone or with the new request ("não, cancele só o
  Produto A"): the no cancels, and the model, called on the same message, may start the new one.

An operation whose policy routes it to approvers (``approvals.py``) ends the turn too, saying so; a
background run instead waits in the call for their decision (``_wait_for_approvers``) and the model
reports it. Otherwise the conversation's next turn puts the outcome before the model, once
(``_approved_meanwhile``).

Confirmation never comes from the model or a tool: tool outputs and assistant messages are never
read as replies, and a model calling the tool again (with ``"confirm": true`` or anything else)
only opens a new operation, which supersedes the pending one and asks the user again — saying so
when it repeats a recent execution, which only a reply to that new question confirms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, Item, ToolSpec
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.base import Interruption, RunPreamble, ToolResult, Toolset
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.approval_store import ApprovalRecords
from hatchway.engine.tools.operations.messages import preamble_items
from hatchway.engine.tools.operations.models import OperationStatus
from hatchway.engine.tools.operations.replies import ReplyEffect
from hatchway.engine.tools.operations.service import OperationResult, OperationService, ResultKind, result_of
from hatchway.engine.tools.operations.turns import conversation_turn, read_turn

WITHDRAWN = "withdrawn: the background response waiting for its approval was cancelled or stopped"
_ASKS = (ResultKind.NEEDS_CONFIRMATION, ResultKind.AWAITING_APPROVAL)
"""Results that end the turn with a message to the user (a question, or that approvers decide)."""


class OperationToolset(Toolset):
    """One run's view of an agent's ``OperationService``, calling through the run's MCP client."""

    def __init__(self, service: OperationService, caller: McpToolCaller) -> None:
        self.service = service
        self.caller = caller
        self._asking: str | None = None
        """The operation this run asks the user to confirm (one per run)."""
        self._turn: str | None = None
        """The conversation's turn (``turns.conversation_turn``): a question asked in this run is
        filed under it, so the reply to it is bound to it."""
        self._lock = asyncio.Lock()

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        return self.service.tool_specs()

    def server_label(self, name: str) -> str | None:
        return self.service.server_of(name)

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        if not self.service.is_operation(call.name):
            return self._result(call, await self._call(call, ctx))
        # Operations of one run go one at a time, and once one waits for the user the others wait
        # too: the user is asked one question, about the operation that is actually pending.
        async with self._lock:
            if self._asking is not None:
                return ToolResult.error(
                    "confirmation_pending",
                    f"Not executed: operation {self._asking} of this turn awaits the user's confirmation. "
                    "Put every item in one call; call again after the user answers.",
                    server=self.service.server_of(call.name),
                    tool=call.name,
                    operation_id=self._asking,
                )
            result = await self._call(call, ctx)
            if result.kind is ResultKind.AWAITING_APPROVAL and ctx.waits_for_approval:
                result = await self._wait_for_approvers(result, ctx)
            if result.kind in _ASKS and result.operation is not None:
                self._asking = result.operation.id
        return self._result(call, result)

    async def _wait_for_approvers(self, result: OperationResult, ctx: RunContext) -> OperationResult:
        """A background run waits here for the operation's approvers (``approval_wait_seconds``);
        the time waited is not the run's: its deadline moves by the wait's budget while it waits,
        and back by what was not used. Decided meanwhile, the model reads the outcome (executed,
        rejected, timed out); otherwise the run reports it pending."""
        assert result.operation is not None
        records = ApprovalRecords(self.service.store)
        budget = self.service.settings.approval_wait_seconds
        started = time.monotonic()
        ctx.extend_deadline(budget)
        try:
            op = await records.wait_for_decision(result.operation.id, budget)
        except asyncio.CancelledError:
            # The response was cancelled (or its replica stops): what nobody waits for any more is
            # withdrawn, never executed later by an approver.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.service.store.cancel(result.operation.id, WITHDRAWN))
            raise
        finally:
            ctx.extend_deadline(time.monotonic() - started - budget)
        if op.state in (OperationStatus.AWAITING_APPROVAL, OperationStatus.EXECUTING):
            return result
        await records.mark_reported(op.id)
        return result_of(op)

    async def before_run(self, items: list[Item], ctx: RunContext) -> RunPreamble | None:
        self._turn = conversation_turn(items)
        turn = read_turn(items, ctx)
        if turn is None:
            return None  # only the end user's own message can answer a confirmation
        reply = await self.service.reply(turn, ctx, self.caller)
        if reply is None:
            return await self._approved_meanwhile(ctx)
        if reply.effect in (ReplyEffect.ASK_AGAIN, ReplyEffect.DECIDED):
            answer = reply.answer or reply.operation.confirmation_message or ""
            return RunPreamble(answer=answer, operation_id=reply.operation.id)
        return RunPreamble(items=reply.items)

    async def _approved_meanwhile(self, ctx: RunContext) -> RunPreamble | None:
        """Operations of this conversation and end user that waited for approvers and ended since
        its last turn: put before the model as their calls and outputs, once, so it tells the user."""
        if ctx.session_key is None:
            return None
        ended = await ApprovalRecords(self.service.store).unreported_outcomes(
            ctx.org_id, self.service.agent, ctx.session_key, ctx.on_behalf_of
        )
        if not ended:
            return None
        return RunPreamble(items=[item for op in ended for item in preamble_items(op)])

    async def _call(self, call: FunctionCall, ctx: RunContext) -> OperationResult:
        return await self.service.call(
            call.name, call.arguments, ctx, self.caller, call_id=call.call_id, turn=self._turn
        )

    def _result(self, call: FunctionCall, result: OperationResult) -> ToolResult:
        """The call's result as the loop takes it; ``meta`` (operation id, status, verdict) goes to the
        run log."""
        meta: dict[str, Any] = {"server": self.service.server_of(call.name), "tool": call.name, **result.meta}
        op = result.operation
        if op is not None and op.verdict:
            meta["verdict"] = op.verdict.get("status")
        meta["outcome"] = Outcome.ERROR if "error_code" in meta else Outcome(result.kind.value)
        interrupt = None
        if result.kind in _ASKS and op is not None:
            interrupt = Interruption(
                message=result.question or op.confirmation_message or "",
                data={"operation_id": op.id, "tool": op.tool, "arguments_digest": op.arguments_digest},
            )
        return ToolResult(output=result.output, is_error=result.is_error, meta=meta, interrupt=interrupt)
