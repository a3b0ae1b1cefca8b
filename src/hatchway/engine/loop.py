"""The agent loop: model → tool calls → execute → append results → model, bounded by rounds and a deadline.

One loop serves both APIs. ``AgentLoop.events()`` yields what happens as it happens (adapters stream
it); ``AgentLoop.run()`` drains it and returns the ``RunResult``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from hatchway.engine.context import BudgetSpent, RunBudget, RunContext
from hatchway.engine.guards.guard import ToolOutputGuard
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message, ToolSpec, Usage
from hatchway.engine.providers.base import (
    OUTPUT_LIMITS,
    ModelRequest,
    ModelResponse,
    StreamDone,
    TextDelta,
    output_limit,
)
from hatchway.engine.providers.routing import ResolvedModel
from hatchway.engine.run_log import (
    BudgetExhaustedStep,
    EstimatedUsageStep,
    LoopStep,
    ModelAnswer,
    ModelCallStep,
    Outcome,
    StepTokens,
    ToolCallStep,
)
from hatchway.engine.steps import (
    NextStep,
    NextStepFinalOutput,
    NextStepGatewayAnswer,
    NextStepInterruption,
    NextStepMaxRounds,
    NextStepPauseForClient,
    NextStepRunAgain,
    NextStepRunTools,
    NextStepTimeout,
)
from hatchway.engine.tools.base import Interruption, ToolResult
from hatchway.engine.tools.payloads import fit_output
from hatchway.engine.tools.router import ToolRouter
from hatchway.engine.tools.subagents.contract import TOOL_NAME as SPAWN_SUBAGENT
from hatchway.tasks import DEADLINE_PASSED

logger = logging.getLogger(__name__)
DEFAULT_MAX_ROUNDS = 10
BUDGET_NOTE = (
    "The budget of this run is spent: no more tools can be called. Answer the user now with what you "
    "have so far, and say briefly if the answer is incomplete."
)
"""What the model is told in the last round of a run whose budget is spent (``agent.max_run_*``)."""


@dataclass(frozen=True, slots=True)
class LoopSettings:
    max_rounds: int = DEFAULT_MAX_ROUNDS
    tool_call_parallel: bool = True
    max_tool_calls: int | None = None
    """The request's own cap on gateway tool calls (the Responses API's ``max_tool_calls``)."""
    max_tool_calls_per_round: int = 32
    max_tool_calls_per_run: int = 128
    """The gateway's caps (hatchway.yaml): a model cannot make it run more than these."""
    max_tool_result_chars: int = 20_000
    budget: RunBudget | None = None
    """The agent's budget for the whole run tree (``agent.max_run_*``); the tree's is the lowest."""
    price: Callable[[str, Usage], float | None] | None = None
    """A model call's cost in USD (upstream model, usage); None when unknown (the cost budget then
    counts only what is priced)."""
    stream_tool_round_text: bool = False
    """Stream the text of every round as it comes, even of rounds that end in gateway tool calls
    (the Responses API, whose output keeps those messages). False is ``stream_mode: final_only``:
    a round's text is held until the round's end shows that it is the answer."""
    guard: ToolOutputGuard | None = None
    """This run's guard on tool output (``engine/guards``); None: results reach the model as they are."""


@dataclass
class RunResult:
    """Everything a run produced, for the adapters and the run log."""

    new_items: list[Item] = field(default_factory=list)
    """Items this run appended to the conversation, in order."""
    text: str | None = None
    """The final assistant text (or the question asked of the user on an interruption)."""
    client_calls: list[FunctionCall] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    rounds: int = 0
    max_rounds_hit: bool = False
    tool_calls: int = 0
    interruption: Interruption | None = None
    operation_id: str | None = None
    """The operation whose question (or, answered by the gateway, whose outcome) the text is."""
    steps: list[LoopStep] = field(default_factory=list)
    """The loop's steps for the run log (the run's other steps are reported to ``ctx.run``)."""
    last_response: ModelResponse | None = None
    budget_exhausted: BudgetSpent | None = None
    """The run tree's budget was spent: its last round ran without tools (the run log's flag)."""

    @property
    def has_tool_calls(self) -> bool:
        return self.tool_calls > 0 or bool(self.client_calls)

    def unstreamed(self, *, after_text: bool) -> str:
        """The text a stream of this run still owes its client: a confirmation's question, or an
        answer given without a model call (neither was streamed); set apart from text streamed before."""
        if self.text and (self.interruption is not None or self.rounds == 0):
            return ("\n\n" if after_text else "") + self.text
        return ""


@dataclass(frozen=True, slots=True)
class RoundStarted:
    round: int


@dataclass(frozen=True, slots=True)
class OutputTextDelta:
    round: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    round: int
    call: FunctionCall
    server: str | None = None
    """The server the call goes to, when its toolset knows it before the call (the stream's
    ``server_label``, the same as the stored item's)."""


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    round: int
    call: FunctionCall
    result: ToolResult
    duration_ms: float


@dataclass(frozen=True, slots=True)
class RunFinished:
    result: RunResult


LoopEvent = RoundStarted | OutputTextDelta | ToolCallStarted | ToolCallFinished | RunFinished


@dataclass
class _RoundText:
    """One model round's streamed text: sent as it comes, or held (``hold``) until the run's end shows
    whether it is the answer.

    With ``final_only`` the text a model writes before calling a gateway tool ("let me look that
    up…") is an intermediate step: only the run log keeps it. Whether a round ends in tool calls is
    known only when its stream ends, so until then its text waits here.
    """

    round: int
    hold: bool
    held: list[str] = field(default_factory=list)
    response: ModelResponse | None = None

    def add(self, text: str) -> OutputTextDelta | None:
        if self.hold:
            self.held.append(text)
            return None
        return OutputTextDelta(self.round, text)

    def release(self) -> list[OutputTextDelta]:
        """The held text, now known to be (part of) what the run returns."""
        deltas = [OutputTextDelta(self.round, text) for text in self.held]
        self.held = []
        return deltas


@dataclass
class _Transcript:
    """What a run has appended and counted so far; the final step turns it into the ``RunResult``."""

    conversation: list[Item]
    new_items: list[Item] = field(default_factory=list)
    steps: list[LoopStep] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    rounds: list[_RoundText] = field(default_factory=list)
    tool_calls: int = 0
    last_response: ModelResponse | None = None
    last_call: tuple[int, float] = (0, 0.0)
    """Tokens and cost of the latest model call: what the next round is expected to cost at least."""
    budget_spent: BudgetSpent | None = None
    """Set when the tree's budget was spent and the last round ran without tools."""

    def append(self, *items: Item) -> None:
        self.conversation.extend(items)
        self.new_items.extend(items)

    def answered(self) -> _RoundText | None:
        """The latest round that has a complete model response."""
        return next((r for r in reversed(self.rounds) if r.response is not None), None)


class _DeadlinePassed(Exception):
    pass


class AgentLoop:
    """Runs one request's rounds against one model and one tool router."""

    def __init__(
        self,
        model: ResolvedModel,
        router: ToolRouter,
        settings: LoopSettings | None = None,
        *,
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.router = router
        self.settings = settings or LoopSettings()
        self.tool_choice = tool_choice
        self.parallel_tool_calls = parallel_tool_calls
        self.params = params or {}

    async def run(self, items: list[Item], ctx: RunContext) -> RunResult:
        """Run to the end without streaming."""
        result: RunResult | None = None
        async for event in self.events(items, ctx, stream=False):
            if isinstance(event, RunFinished):
                result = event.result
        assert result is not None
        return result

    async def events(self, items: list[Item], ctx: RunContext, *, stream: bool) -> AsyncIterator[LoopEvent]:
        """The run as events; the last one is always ``RunFinished``. Each round ends in the step that
        says what comes next; the run ends at the first that is not ``NextStepRunAgain``."""
        run = _Transcript(conversation=list(items))
        note = self.settings.guard.system_note() if self.settings.guard is not None else None
        if note is not None:  # what the spotlight's markers mean, before anything a tool says
            run.conversation.insert(0, note)
        if self.settings.guard is not None:  # earlier tool output given back: untrusted as it was then
            self.settings.guard.taint_from(items, ctx)
        ctx.run.run_budget(self.settings.budget)
        ctx.run.round = 1  # the tools are listed for the first round
        specs = await self.router.prepare(ctx)
        if self.settings.guard is not None:
            specs = self.settings.guard.tools(specs, ctx)
        step: NextStep = await self._preamble(run, ctx)
        while isinstance(step, NextStepRunAgain):
            async for event in self._round(run, specs, ctx, stream=stream):
                if isinstance(event, NextStep):
                    step = event
                else:
                    yield event
        assert not isinstance(step, NextStepRunAgain | NextStepRunTools)
        answer = (
            run.answered() if not isinstance(step, NextStepInterruption | NextStepGatewayAnswer) else None
        )
        for delta in answer.release() if answer is not None else ():
            yield delta
        yield RunFinished(self._result(step, run))

    async def _preamble(self, run: _Transcript, ctx: RunContext) -> NextStep:
        """The toolsets' items before the first round; a toolset may answer at once (no model call)."""
        for toolset in self.router.toolsets:
            preamble = await toolset.before_run(run.conversation, ctx)
            if preamble is None:
                continue
            run.append(*preamble.items)
            if preamble.answer is not None:
                return NextStepGatewayAnswer(preamble.answer, preamble.operation_id)
        return NextStepRunAgain()

    # -- one round -------------------------------------------------------------------------------

    async def _round(
        self, run: _Transcript, specs: list[ToolSpec], ctx: RunContext, *, stream: bool
    ) -> AsyncIterator[LoopEvent | NextStep]:
        """One model call and the gateway's tool calls it asked for; the last thing yielded is the
        round's next step."""
        number = len(run.rounds) + 1
        ctx.run.round = number  # what the toolsets report from now on is of this round
        if number > 1 and run.budget_spent is None:
            tokens, cost = run.last_call
            spent = run.budget_spent = ctx.run.budget_spent(next_tokens=tokens, next_cost=cost)
            if spent is not None:
                run.steps.append(BudgetExhaustedStep(spent.budget, spent.used, spent.limit))
                ctx.run.budget_exhausted = spent
        yield RoundStarted(number)
        request = self._within_share(self._request(run, specs), ctx)
        if run.budget_spent is not None:  # the last round: no tools, and the model is told why
            note = Message(role="system", content=BUDGET_NOTE)
            request = dataclasses.replace(
                request, items=[*run.conversation, note], tools=[], tool_choice=None
            )
        text = _RoundText(number, hold=stream and self._holds_text(request))
        run.rounds.append(text)
        started = time.monotonic()
        try:
            async for delta in self._model_round(request, ctx, text, stream=stream):
                yield delta
        except _DeadlinePassed:
            run.steps.append(_model_step(number, started, None, Outcome.TIMEOUT))
            yield NextStepTimeout()
            return
        response = text.response
        assert response is not None
        if run.budget_spent is not None and response.tool_calls:  # asked for tools it was not given
            response.tool_calls = []
        self._record_response(run, response, started, ctx)
        step = self._decide(response)
        if isinstance(step, NextStepFinalOutput):
            yield step
            return
        calls = step.calls if isinstance(step, NextStepRunTools) else step.server_calls
        after: NextStep = NextStepRunAgain()
        async for event in self._run_tools(calls, run, ctx):
            if isinstance(event, NextStep):
                after = event
            else:
                yield event
        if isinstance(after, NextStepTimeout) or isinstance(step, NextStepPauseForClient):
            yield after if isinstance(after, NextStepTimeout) else step
        elif isinstance(after, NextStepInterruption):
            yield after
        else:
            yield self._after_tools(number, response)

    def _request(self, run: _Transcript, specs: list[ToolSpec]) -> ModelRequest:
        budget_left = run.tool_calls < self._run_cap()[0]
        tools = specs if budget_left else list(self.router.client_tools)
        return ModelRequest(
            model=self.model.upstream_model,
            items=run.conversation,
            tools=tools,
            tool_choice=self.tool_choice,
            parallel_tool_calls=self.parallel_tool_calls,
            params=self.params,
        )

    def _within_share(self, request: ModelRequest, ctx: RunContext) -> ModelRequest:
        """A subagent's round asks for no more output than its share of the tree's tokens leaves
        once its prompt is counted (four bytes a token; at least 1): what one round of a child
        can pass its share by is then its prompt's estimate's error."""
        if ctx.run.share is None or (room := ctx.run.token_room()) is None:
            return request
        cap = max(room - _prompt_estimate(request), 1)
        params = {
            key: min(value, cap) if key in OUTPUT_LIMITS and type(value) is int else value
            for key, value in request.params.items()
        }
        if output_limit(params) is None:
            params["max_completion_tokens"] = cap
        return dataclasses.replace(request, params=params)

    def _holds_text(self, request: ModelRequest) -> bool:
        """Hold a streamed round's text unless no gateway tool is offered (then every round's text
        is the answer) or the adapter streams tool rounds too."""
        if self.settings.stream_tool_round_text:
            return False
        client = {t.name for t in self.router.client_tools}
        return any(t.name not in client for t in request.tools)

    async def _model_round(
        self, request: ModelRequest, ctx: RunContext, current: _RoundText, *, stream: bool
    ) -> AsyncIterator[OutputTextDelta]:
        """One model call; its text deltas as ``current`` lets them through, its response in ``current``."""
        if not stream:
            current.response = await _before_deadline(self.model.provider.request(request), ctx)
            return
        events = self.model.provider.stream(request)
        streamed = 0
        try:
            while True:
                try:
                    event = await _before_deadline(anext(events), ctx)
                except StopAsyncIteration:
                    break
                if isinstance(event, StreamDone):
                    current.response = event.response
                elif isinstance(event, TextDelta):
                    streamed += len(event.text)
                    delta = current.add(ctx.redact(event.text))
                    if delta is not None:
                        yield delta
        except (asyncio.CancelledError, GeneratorExit):  # the client went away mid-call
            if current.response is None:
                self._count_abandoned(request, streamed, ctx)
            raise
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    def _count_abandoned(self, request: ModelRequest, streamed_chars: int, ctx: RunContext) -> None:
        """A stream abandoned before the upstream's usage came: counted as an estimate (the request's
        size, the text streamed so far; four characters a token), so spend, budgets and token limits
        see it — the upstream bills what it generated. The run log says it is an estimate."""
        # Inside the cancellation's handler: nothing here may raise in its place (``default=str``).
        prompt = _prompt_estimate(request)
        usage = Usage(prompt_tokens=prompt, completion_tokens=math.ceil(streamed_chars / 4))
        cost = self.model.provider.estimate_cost(request.model, usage)
        if cost is None:
            usage.unpriced_calls = 1
        else:
            usage.cost_usd = cost
        ctx.run.usage.add(usage)
        ctx.run.cost_usd += cost or 0.0
        ctx.run.report(EstimatedUsageStep(ctx.run.round, StepTokens.of(usage)))

    def _record_response(
        self, run: _Transcript, response: ModelResponse, started: float, ctx: RunContext
    ) -> None:
        if response.text:  # a model that decoded a secret a tool encoded some other way
            response.text = ctx.redact(response.text)
        run.steps.append(_model_step(len(run.rounds), started, response, Outcome.OK))
        run.usage.add(response.usage)
        ctx.run.usage.add(response.usage)
        cost = self.settings.price(self.model.upstream_model, response.usage) if self.settings.price else None
        ctx.run.cost_usd += cost or 0.0
        run.last_call = (response.usage.total_tokens, cost or 0.0)
        run.last_response = response
        text = [Message(role="assistant", content=response.text)] if response.text else []
        run.append(*text, *response.tool_calls)

    def _decide(
        self, response: ModelResponse
    ) -> NextStepFinalOutput | NextStepRunTools | NextStepPauseForClient:
        if not response.tool_calls:
            return NextStepFinalOutput(response)
        client = [c for c in response.tool_calls if self.router.is_client_call(c)]
        server = [c for c in response.tool_calls if not self.router.is_client_call(c)]
        if client:
            return NextStepPauseForClient(response, client_calls=client, server_calls=server)
        return NextStepRunTools(calls=server)

    def _after_tools(self, number: int, response: ModelResponse) -> NextStepRunAgain | NextStepMaxRounds:
        """After a round's tools ran: another round, or stop at ``max_rounds``.

        The seed's flow runs the round's tool calls first and checks ``round < max_rounds`` after
        (004: execute → append results → "Round < max_rounds?" → else return the last model
        response), so the last round's calls are executed and recorded, never left dangling.
        """
        return NextStepMaxRounds(response) if number >= self.settings.max_rounds else NextStepRunAgain()

    # -- tools ----------------------------------------------------------------------------------

    async def _run_tools(
        self, calls: list[FunctionCall], run: _Transcript, ctx: RunContext
    ) -> AsyncIterator[ToolCallStarted | ToolCallFinished | NextStep]:
        """Run a round's gateway calls (those over the caps are refused); the last thing
        yielded says how they ended: the deadline passed, a call needs the user, or all answered."""
        number = len(run.rounds)
        allowed, refused = self._within_budget(calls, run, ctx)
        started = {call.call_id for call in allowed}
        # Counted as they start, not as they end: a subagent that fails while or after running a
        # tool is then known to have run one, and is not run again (``subagents/toolset.py``). A
        # call of a tool no toolset has (none listed it this run) reaches nothing and is not counted.
        ctx.run.tool_calls += sum(1 for call in allowed if self.router.owns(call))
        ctx.run.spawns_pending = sum(1 for call in allowed if call.name == SPAWN_SUBAGENT)
        for call in allowed:
            yield ToolCallStarted(number, call, self.router.server_label(call))
        outcomes: dict[str, tuple[ToolResult, float]] = {}
        timed_out = False
        try:
            if self.settings.tool_call_parallel and len(allowed) > 1:
                await self._gather(allowed, ctx, outcomes)
            else:
                for call in allowed:
                    outcomes[call.call_id] = await _before_deadline(self._timed_call(call, ctx), ctx)
        except _DeadlinePassed:
            timed_out = True
        for call, refusal in refused:
            outcomes[call.call_id] = (refusal, 0.0)
        interruption: Interruption | None = None
        finished: dict[str, tuple[ToolResult, float]] = {}
        for call in calls:
            tool_result, duration = outcomes.get(call.call_id) or (
                ToolResult.error(
                    "timeout", "The run's deadline passed before this tool finished.", outcome=Outcome.TIMEOUT
                ),
                0.0,
            )
            tool_result.output = self._fit(ctx.redact(tool_result.output))
            finished[call.call_id] = (tool_result, duration)
        if self.settings.guard is not None:
            await _guard(self.settings.guard, [c for c in calls if c.call_id in started], finished, ctx)
        for call in calls:
            tool_result, duration = finished[call.call_id]
            run.append(FunctionCallOutput(call_id=call.call_id, output=tool_result.output))
            run.steps.append(_tool_step(number, call, tool_result, duration, ctx))
            if tool_result.interrupt is not None and interruption is None:
                interruption = tool_result.interrupt
            if call.call_id in started:
                yield ToolCallFinished(number, call, tool_result, duration)
        run.tool_calls += len(allowed)
        if timed_out:
            yield NextStepTimeout()
        elif interruption is not None:
            yield NextStepInterruption(interruption)
        else:
            yield NextStepRunAgain()

    def _run_cap(self) -> tuple[int, str]:
        """The run's cap on gateway tool calls, and what a call past it is told."""
        per_run = self.settings.max_tool_calls_per_run
        own = self.settings.max_tool_calls
        if own is not None and own <= per_run:
            return own, "This response reached max_tool_calls; not run."
        return per_run, f"This run reached the gateway's limit of {per_run} tool calls; not run."

    def _within_budget(
        self, calls: list[FunctionCall], run: _Transcript, ctx: RunContext
    ) -> tuple[list[FunctionCall], list[tuple[FunctionCall, ToolResult]]]:
        """The calls that run, and the refused ones with their structured error: past the round's
        cap (``too_many_tool_calls``), then past the run's (``max_tool_calls_reached``)."""
        per_round = self.settings.max_tool_calls_per_round
        over_round = [
            (
                call,
                ToolResult.error(
                    "too_many_tool_calls",
                    f"This round asked for {len(calls)} tool calls; at most {per_round} run in one round. "
                    "Not run: call it again in the next round if it is still needed.",
                ),
            )
            for call in calls[per_round:]
        ]
        cap, message = self._run_cap()
        code = "max_tool_calls_reached"
        room = max(cap - run.tool_calls, 0)
        tree_room = ctx.run.tool_calls_left()
        if tree_room is not None and tree_room < room:
            room, code = tree_room, "run_budget_exhausted"
            message = "This run tree's budget of tool calls (agent.max_run_tool_calls) is spent; not run."
        in_round = calls[:per_round]
        over_run = [(call, ToolResult.error(code, message)) for call in in_round[room:]]
        return list(in_round[:room]), [*over_run, *over_round]

    async def _gather(
        self, calls: list[FunctionCall], ctx: RunContext, outcomes: dict[str, tuple[ToolResult, float]]
    ) -> None:
        tasks = {asyncio.create_task(self._timed_call(c, ctx)): c for c in calls}
        done: set[asyncio.Task[tuple[ToolResult, float]]] = set()
        pending = set(tasks)
        try:
            # Until the deadline, read again after each wake: a call that waits for people (an
            # approval, ``operations/toolset.py``) moves the deadline by the time it waited.
            while pending and ctx.remaining() > 0:
                finished, pending = await asyncio.wait(pending, timeout=ctx.remaining())
                done |= finished
        except asyncio.CancelledError as cancelled:  # the caller went away, or the response was cancelled
            for task in tasks:
                task.cancel(*cancelled.args)  # why, passed on (``hatchway.tasks.CANCELLED_BY_REQUEST``)
            raise
        for task in done:
            outcomes[tasks[task].call_id] = task.result()
        if pending:
            for task in pending:
                task.cancel(DEADLINE_PASSED)
            await asyncio.gather(*pending, return_exceptions=True)
            raise _DeadlinePassed

    async def _timed_call(self, call: FunctionCall, ctx: RunContext) -> tuple[ToolResult, float]:
        started, started_at = time.monotonic(), time.time()
        try:
            tool_result = await self.router.call(call, ctx)
        except Exception as exc:  # a failing tool never crashes the loop
            # Its message stays in the gateway's log: it may quote SQL, parameters or hosts.
            logger.exception("tool call %s (%s) failed inside the gateway", call.call_id, call.name)
            message = (
                f"{type(exc).__name__}: the gateway could not run this tool (an internal error, logged)."
            )
            tool_result = ToolResult.error("tool_failed", message)
        tool_result.meta["started_at_ms"] = milliseconds(started_at, 1)  # the run log's waterfall
        return tool_result, (time.monotonic() - started) * 1000

    def _fit(self, output: str) -> str:
        return fit_output(output, self.settings.max_tool_result_chars)

    # -- the end ---------------------------------------------------------------------------------

    def _result(self, step: NextStep, run: _Transcript) -> RunResult:
        """What the run produced, as its final step describes it."""
        result = RunResult(
            new_items=run.new_items,
            usage=run.usage,
            rounds=len(run.rounds),
            tool_calls=run.tool_calls,
            steps=run.steps,
            last_response=run.last_response,
            budget_exhausted=run.budget_spent,
        )
        if isinstance(step, NextStepFinalOutput):
            result.text, result.finish_reason = step.response.text, step.response.finish_reason
        elif isinstance(step, NextStepPauseForClient):
            result.text, result.finish_reason = step.response.text, "tool_calls"
            result.client_calls = step.client_calls
        elif isinstance(step, NextStepMaxRounds):
            result.text, result.finish_reason, result.max_rounds_hit = step.response.text, "max_rounds", True
        elif isinstance(step, NextStepTimeout):
            last = run.last_response
            result.text, result.finish_reason = (last.text if last is not None else None), "timeout"
        elif isinstance(step, NextStepInterruption | NextStepGatewayAnswer):
            message = step.interruption.message if isinstance(step, NextStepInterruption) else step.text
            result.new_items.append(Message(role="assistant", content=message))
            result.text, result.finish_reason = message, "stop"
            if isinstance(step, NextStepInterruption):
                result.interruption = step.interruption
                result.operation_id = step.interruption.data.get("operation_id")
            else:
                result.operation_id = step.operation_id
        return result


async def _before_deadline(awaitable: Any, ctx: RunContext) -> Any:
    remaining = ctx.remaining()
    if remaining <= 0:
        if hasattr(awaitable, "close"):
            awaitable.close()
        raise _DeadlinePassed
    try:
        async with asyncio.timeout(remaining) as timer:  # unlike wait_for, no task of its own per call
            ctx.run.deadline_timer = timer  # moved by a call that waits for people (an approval)
            try:
                return await awaitable
            finally:
                ctx.run.deadline_timer = None
    except TimeoutError:
        raise _DeadlinePassed from None


def milliseconds(seconds: float, decimals: int = 3) -> float:
    """``seconds`` in milliseconds, to ``decimals`` places (for the run log's steps).

    Not ``round(x, n)``: a float rounded to n places goes through CPython's decimal conversion
    (``dtoa``), which cost ~15 µs per model step after the event loop had been idle (make bench's
    concurrency 1); rounding an integer of the scaled value costs a multiply. The two differ only
    in the last place of a value halfway between two (~1 in 1,000)."""
    scale = 10**decimals
    return round(seconds * 1000 * scale) / scale


def _model_step(
    round_no: int, started: float, response: ModelResponse | None, outcome: Outcome
) -> ModelCallStep:
    elapsed = time.monotonic() - started
    started_at, duration = milliseconds(time.time() - elapsed, 1), milliseconds(elapsed)
    if response is None:
        return ModelCallStep(round_no, started_at, duration, outcome)
    answer = ModelAnswer(
        finish_reason=response.finish_reason,
        tool_calls=tuple(c.name for c in response.tool_calls),
        upstream_model=response.model or None,
        priced_as=response.priced_as,
        served_by=response.served_by,  # a model with several targets or fallbacks
        failed_attempts=tuple(response.failed_attempts),
    )
    return ModelCallStep(round_no, started_at, duration, outcome, StepTokens.of(response.usage), answer)


def _tool_step(
    round_no: int, call: FunctionCall, result: ToolResult, duration_ms: float, ctx: RunContext
) -> ToolCallStep:
    return ToolCallStep.of(
        result.meta,
        round=round_no,
        call_id=call.call_id,
        name=call.name,
        arguments=ctx.redact(call.arguments),
        duration_ms=milliseconds(duration_ms / 1000),
        is_error=result.is_error,
        result_preview=result.output[:500],
    )


async def _guard(
    guard: ToolOutputGuard,
    calls: list[FunctionCall],
    finished: dict[str, tuple[ToolResult, float]],
    ctx: RunContext,
) -> None:
    """The guard's look at each result the tools gave (an external classifier's, concurrently)."""
    results = [finished[c.call_id][0] for c in calls]
    seen = await asyncio.gather(
        *(guard.inspect(c.name, r.output, ctx) for c, r in zip(calls, results, strict=True))
    )
    for tool_result, inspected in zip(results, seen, strict=True):
        tool_result.output = inspected.output
        if inspected.findings:
            tool_result.meta["guard"] = inspected.record()


def _prompt_estimate(request: ModelRequest) -> int:
    """A request's prompt in tokens, estimated as four bytes of its items and tools a token (it
    never raises: ``default=str``)."""
    return math.ceil(len(orjson.dumps([request.items, request.tools], default=str)) / 4)
