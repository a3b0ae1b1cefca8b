"""The end user's reply to a confirmation question: bound to that question, decided once.

A message is bound to the question it answers (``turns.py``), not to whatever is pending when it is
read:

- bound to a pending operation: yes executes it (exactly one concurrent yes wins the claim; the
  others are its duplicates), no cancels it, anything else asks the question again;
- bound to a question decided already — a double click, a client's retry, a second tab, the confirm
  endpoint first, a newer request, expiry — a yes is answered by the gateway with what became of
  that operation, waiting for it while it executes; the model is not called, so it cannot call the
  tool again;
- bound to nothing: the conversation's pending operation decides. A yes under another message than
  its question, or to an operation that repeats a recent execution, asks the question again; a bare
  yes (no question in the request) with nothing pending, moments after a confirmation, is that
  confirmation again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from hatchway.config.agents import OperationSettings
from hatchway.engine.context import RunContext
from hatchway.engine.items import Item
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.confirmation import ConfirmationVocabulary, ReplyKind, classify_reply
from hatchway.engine.tools.operations.execution import OperationConflict, check_end_user, confirm_operation
from hatchway.engine.tools.operations.messages import decided_answer, preamble_items
from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus
from hatchway.engine.tools.operations.store import EXPIRED, OperationStore
from hatchway.engine.tools.operations.turns import ECHO_HEADER, Turn, shows, turn_key
from hatchway.errors import InvalidRequest, NotFound

S = OperationStatus


class ReplyEffect(StrEnum):
    CONFIRMED = "confirmed"
    CANCELLED = "cancelled"
    ASK_AGAIN = "ask_again"
    EXPIRED = "expired"
    DECIDED = "decided"
    """The question was decided already (executed, executing or not executed): ``answer`` says how."""


@dataclass(slots=True)
class ReplyResult:
    """What the user's reply did to the conversation's pending operation."""

    effect: ReplyEffect
    operation: OperationRecord
    items: list[Item] = field(default_factory=list)
    """The operation as a call + output, for the model to report (CONFIRMED, CANCELLED, EXPIRED)."""
    answer: str | None = None
    """For ASK_AGAIN: the question to repeat to the user; for DECIDED: the decision's outcome."""


class Replies:
    """Reads one agent's end users' replies against its operations."""

    def __init__(
        self,
        agent: str,
        store: OperationStore,
        settings: OperationSettings,
        vocabulary: ConfirmationVocabulary,
    ) -> None:
        self.agent = agent
        self.store = store
        self.settings = settings
        self.vocabulary = vocabulary

    async def read(self, turn: Turn, ctx: RunContext, caller: McpToolCaller) -> ReplyResult | None:
        """Decide what the end user's new message does to the question it answers; None: nothing
        (the model reads the message)."""
        if ctx.session_key is None:
            return None
        kind = classify_reply(turn.reply, self.vocabulary)
        bound = await self._bound(turn, ctx)
        if bound is None:
            return await self._unbound(turn, kind, ctx, caller)
        # While it is pending, the conversation answers to its end user alone: anyone else's message,
        # a yes or a no or anything, is refused rather than read as a reply (or answered with it).
        check_end_user(bound, ctx)
        if bound.state is S.AWAITING_CONFIRMATION:
            return await self._decide(bound, kind, turn, ctx, caller)
        return await self._decided(bound, kind, turn, ctx)

    async def _bound(self, turn: Turn, ctx: RunContext) -> OperationRecord | None:
        """The operation whose question ``turn`` answers: the one it echoes, else the latest asked
        in the turn before it that the client shows, else the latest whose question it shows."""
        assert ctx.session_key is not None
        if turn.echoed is not None:
            return await self._echoed(turn.echoed, ctx)
        key = turn_key(ctx.org_id, self.agent, ctx.session_key, turn.before)
        asked = await self.store.asked_in(ctx.org_id, key)
        if turn.shown is not None:
            # Asked in this very turn: the question anywhere in what the client shows (a client may
            # add a footer). By its words alone: only as the end of it.
            asked = [op for op in asked if shows(turn.shown, op.confirmation_message, anywhere=True)]
            if not asked:  # a client that keeps the question but not every user message before it
                recent = await self.store.questions_of(ctx.org_id, self.agent, ctx.session_key)
                asked = [op for op in recent if shows(turn.shown, op.confirmation_message)]
        return await self.store.get(asked[0].id, org_id=ctx.org_id) if asked else None

    async def _echoed(self, op_id: str, ctx: RunContext) -> OperationRecord:
        """The operation a client names explicitly, as the confirm endpoint takes it: any of this
        organisation's operations of this agent (its end user is checked next)."""
        try:
            op = await self.store.get(op_id, org_id=ctx.org_id)
        except NotFound:
            op = None
        if op is None or op.agent != self.agent:
            raise InvalidRequest(
                f"{ECHO_HEADER}: no operation {op_id[:64]!r} of agent {self.agent!r} in this organisation",
                param=ECHO_HEADER,
                code="operation_not_found",
            )
        return op

    async def _unbound(
        self, turn: Turn, kind: ReplyKind, ctx: RunContext, caller: McpToolCaller
    ) -> ReplyResult | None:
        """A message bound to no question: the conversation's pending operation, if any, decides
        how it is read."""
        assert ctx.session_key is not None
        pending = await self.store.pending_for(ctx.org_id, self.agent, ctx.session_key)
        if pending is None:
            if kind is ReplyKind.YES and turn.shown is None and turn.echoed is None:
                # A bare yes (the client sends no question) moments after a confirmation: that one again.
                since = self.store.clock() - timedelta(seconds=self.settings.duplicate_window_seconds)
                last = await self.store.last_confirmed(
                    ctx.org_id, self.agent, ctx.session_key, ctx.on_behalf_of, since=since
                )
                if last is not None:
                    return await self._decided(last, kind, turn, ctx)
            return None
        check_end_user(pending, ctx)
        if kind is ReplyKind.YES and (turn.shown is not None or pending.repeat_of is not None):
            # The client shows something else than the question (the user did not see it last), or
            # the operation repeats a recent execution: only a reply to its own question confirms it.
            return await self._ask_again(pending, turn)
        return await self._decide(pending, kind, turn, ctx, caller)

    async def _decide(
        self, op: OperationRecord, kind: ReplyKind, turn: Turn, ctx: RunContext, caller: McpToolCaller
    ) -> ReplyResult:
        """The end user's answer to the pending ``op``'s question."""
        if self.store.is_expired(op):
            expired = await self.store.get(op.id, org_id=ctx.org_id)  # applies the expiry
            return ReplyResult(ReplyEffect.EXPIRED, expired, preamble_items(expired))
        if kind is ReplyKind.AMBIGUOUS:
            return await self._ask_again(op, turn)
        if kind is ReplyKind.NO:
            if await self.store.cancel(op.id, "cancelled by the user's reply", org_id=ctx.org_id):
                current = await self.store.get(op.id, org_id=ctx.org_id)
                return ReplyResult(ReplyEffect.CANCELLED, current, preamble_items(current))
            return await self._decided(await self.store.get(op.id, org_id=ctx.org_id), kind, turn, ctx)
        try:
            confirmation = await confirm_operation(
                self.store, op.id, caller, ctx, via="reply", wait_seconds=self.wait_seconds(ctx)
            )
        except OperationConflict as exc:  # expired or cancelled between our read and the claim
            expired = exc.code == "operation_expired"
            decided = ReplyEffect.EXPIRED if expired else ReplyEffect.CANCELLED
            return ReplyResult(decided, exc.operation, preamble_items(exc.operation))
        done = confirmation.operation
        if not confirmation.executed:  # a concurrent reply to the same question claimed it first
            return await self._decided(done, kind, turn, ctx)
        return ReplyResult(ReplyEffect.CONFIRMED, done, preamble_items(done))

    async def _decided(
        self, op: OperationRecord, kind: ReplyKind, turn: Turn, ctx: RunContext
    ) -> ReplyResult | None:
        """A reply to a question that was decided already: by a reply like this one (a duplicate), by
        another tab or the confirm endpoint, by a newer request, or by time."""
        assert ctx.session_key is not None
        pending = await self.store.pending_for(ctx.org_id, self.agent, ctx.session_key)
        if pending is not None:
            check_end_user(pending, ctx)  # the conversation answers to its pending operation's user
        if kind is ReplyKind.AMBIGUOUS:  # not an answer to that question: to the open one, if any
            return await self._ask_again(pending, turn) if pending is not None else None
        if kind is ReplyKind.NO and op.state is S.CANCELLED:  # the no said again: as the first one
            return ReplyResult(ReplyEffect.CANCELLED, op, preamble_items(op))
        if kind is ReplyKind.YES and op.state is S.CANCELLED and op.status_reason == EXPIRED:
            return ReplyResult(ReplyEffect.EXPIRED, op, preamble_items(op))
        if op.state is S.EXECUTING:
            op = await self.store.wait_for_outcome(op.id, self.wait_seconds(ctx))
        if pending is not None and pending.id != op.id:
            await self._file(pending, turn)  # the answer ends with the open question: a reply binds to it
        else:
            pending = None
        return ReplyResult(ReplyEffect.DECIDED, op, answer=decided_answer(op, pending))

    async def _ask_again(self, op: OperationRecord, turn: Turn) -> ReplyResult:
        await self._file(op, turn)
        return ReplyResult(ReplyEffect.ASK_AGAIN, op, answer=op.confirmation_message)

    async def _file(self, op: OperationRecord, turn: Turn) -> None:
        """``op``'s question is asked (again) in answer to ``turn``'s message."""
        if op.session_key is not None:
            await self.store.file_question(op, turn_key(op.org_id, self.agent, op.session_key, turn.through))

    def wait_seconds(self, ctx: RunContext) -> float:
        """How long a duplicate confirmation waits for an executing operation's outcome
        (``operations.duplicate_wait_seconds``, within the run's deadline)."""
        return max(min(self.settings.duplicate_wait_seconds, ctx.remaining()), 0.0)
