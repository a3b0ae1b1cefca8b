"""Runs one response on the agent loop: prepare (plan, chain, checks), execute, store, log.

The same path serves a plain request, a streamed one, a background one and a subagent child;
only where the events go (an ``EventLog`` or nowhere) and who awaits the run differ.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

from hatchway.api.responses_compact import open_compactions, previous_not_found
from hatchway.api.responses_items import (
    item_of,
    output_records,
    output_text,
    pending_client_calls,
    wire_items,
)
from hatchway.api.responses_queue import queued_job
from hatchway.api.responses_stream import EventLog, ResponseStreamWriter, terminal_event
from hatchway.api.responses_wire import CreateResponseRequest, parse_input, response_object
from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message, Usage
from hatchway.engine.loop import AgentLoop, RunFinished, RunResult, ToolCallFinished
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.router import ToolRouter
from hatchway.engine.tools.subagents import CHILD_RUNNER_KEY, ChildOutcome, ChildRequest
from hatchway.errors import HatchwayError, InvalidRequest, NotFound, ProviderStatusError
from hatchway.gateway import Gateway
from hatchway.ids import new_id
from hatchway.observability.runlog import RequestTrace
from hatchway.store.responses import ACTIVE, Outcome, ResponseRecord
from hatchway.store.tables import utcnow

INTERRUPTED = (
    "The run was interrupted before it finished: the gateway shut down or restarted, "
    "or the client went away. Create the response again."
)


@dataclass
class ResponseRun:
    """One prepared response: its record, the conversation for the model and the loop to run."""

    record: ResponseRecord
    stored: bool
    input_records: list[dict[str, Any]]
    conversation: list[Item]
    loop: AgentLoop
    router: ToolRouter
    ctx: RunContext
    trace: RequestTrace
    writer: ResponseStreamWriter | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    queued: bool = False
    """Stored for the job queue (a worker runs it), rather than run by this process."""

    def snapshot(self) -> dict[str, Any]:
        """The Response object as it stands (what lifecycle events carry)."""
        return response_object(self.record, self.output)

    def attach_stream(self) -> EventLog:
        log = EventLog()
        self.writer = ResponseStreamWriter(log)
        return log


class ResponseRunner:
    """Prepares and executes responses for one gateway; also the hosted subagents' child runner."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    # -- prepare ---------------------------------------------------------------------------------

    async def prepare(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        *,
        parent_response_id: str | None = None,
        call_id: str | None = None,
        local_history: list[dict[str, Any]] | None = None,
    ) -> ResponseRun:
        """Everything up to the first model call; raises (and logs) HatchwayError for bad requests.

        ``local_history`` is a conversation held outside the store (a WebSocket's ``store: false``
        responses); it replaces the stored chain of ``previous_response_id``.
        """
        ctx.response_id = new_id("resp")
        ctx.extras[CHILD_RUNNER_KEY] = self
        trace = RequestTrace(
            "responses", ctx, model=body.model, response_id=ctx.response_id, parent_id=parent_response_id
        )
        try:
            return await self._prepare(body, ctx, trace, parent_response_id, call_id, local_history)
        except HatchwayError as exc:
            self.gw.log_writer.submit(trace.to_record(http_status=exc.status_code, error=exc.message))
            raise

    async def _prepare(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        trace: RequestTrace,
        parent_response_id: str | None,
        call_id: str | None,
        local_history: list[dict[str, Any]] | None = None,
    ) -> ResponseRun:
        if local_history is None:
            history, root_id = await self._history(body, ctx)
        else:
            history, root_id = local_history, None
        ctx.session_key = ctx.session_key or root_id or ctx.response_id
        input_records = await open_compactions(self.gw, ctx.org_id, parse_input(body.input))
        check_call_outputs(history, input_records)
        conversation, loop, router = await self._plan(body, ctx, trace, [*history, *input_records])
        now = utcnow()
        record = ResponseRecord(
            id=ctx.response_id,
            org_id=ctx.org_id,
            status="queued" if body.background else "in_progress",
            model=body.model,
            request=body.echoed(),
            previous_response_id=body.previous_response_id,
            parent_response_id=parent_response_id,
            call_id=call_id,
            depth=ctx.depth,
            background=bool(body.background),
            on_behalf_of=ctx.on_behalf_of,
            created_at=now,
            updated_at=now,
        )
        stored = body.store is not False
        job = await queued_job(self.gw, body, ctx) if stored and local_history is None else None
        if stored:
            if local_history is not None:
                # The previous response exists only on the socket: this one starts a stored chain
                # that carries the whole conversation, so it replays without the socket.
                record.previous_response_id = None
            await self.gw.responses.create(record, [*(local_history or []), *input_records], job=job)
        run = ResponseRun(record, stored, input_records, conversation, loop, router, ctx, trace)
        run.queued = job is not None
        return run

    async def _plan(
        self, body: CreateResponseRequest, ctx: RunContext, trace: RequestTrace, records: list[dict[str, Any]]
    ) -> tuple[list[Item], AgentLoop, ToolRouter]:
        """The conversation for the model, the loop and its tool router (history + input records)."""
        plan = await self.gw.plan_run(body.model, ctx, ctx.request_headers)
        trace.agent = plan.agent.name if plan.agent else None
        trace.plugin_source = plan.plugin_source
        if body.max_tool_calls is not None:
            plan.loop.max_tool_calls = body.max_tool_calls
        # A response's output keeps the messages of its tool rounds, and its stream shows each
        # gateway call as an mcp_call item: the text of those rounds streams too, in order.
        plan.loop.stream_tool_round_text = True
        conversation: list[Item] = [
            Message(role="system", content=text) for text in (plan.instructions, body.instructions) if text
        ]
        conversation.extend(item_of(r) for r in records)
        router = ToolRouter(toolsets=plan.toolsets, client_tools=body.client_tools())
        loop = AgentLoop(
            plan.model,
            router,
            plan.loop,
            tool_choice=body.upstream_tool_choice(),
            parallel_tool_calls=body.parallel_tool_calls,
            params=body.upstream_params(),
        )
        return conversation, loop, router

    async def restore(
        self, body: CreateResponseRequest, ctx: RunContext, record: ResponseRecord
    ) -> ResponseRun:
        """A stored response rebuilt from the database to run elsewhere (a worker of the job queue).

        ``ctx`` carries who asked and the request headers; history and input come from the store.
        A plan that fails now (a secret deleted meanwhile…) fails the response, as it would have
        failed the request at creation.
        """
        ctx.response_id = record.id
        ctx.extras[CHILD_RUNNER_KEY] = self
        trace = RequestTrace(
            "responses", ctx, model=body.model, response_id=record.id, parent_id=record.parent_response_id
        )
        input_records = await self.gw.responses.items(record.id, "input")
        try:
            history, root_id = await self._history(body, ctx)
            ctx.session_key = ctx.session_key or root_id or ctx.response_id
            conversation, loop, router = await self._plan(body, ctx, trace, [*history, *input_records])
        except HatchwayError as exc:
            error = error_object(exc, ctx)
            await self.gw.responses.finish(record.id, Outcome(status="failed", output=[], error=error))
            self.gw.log_writer.submit(trace.to_record(http_status=exc.status_code, error=error["message"]))
            raise
        return ResponseRun(record, True, input_records, conversation, loop, router, ctx, trace)

    async def _history(
        self, body: CreateResponseRequest, ctx: RunContext
    ) -> tuple[list[dict[str, Any]], str | None]:
        if not body.previous_response_id:
            return [], None
        try:
            chain = await self.gw.responses.chain(ctx.org_id, body.previous_response_id)
        except NotFound:
            raise previous_not_found(body.previous_response_id) from None
        previous = chain[-1]
        if previous.status in ACTIVE:
            raise InvalidRequest(
                f"previous_response_id: response '{previous.id}' is still {previous.status}; "
                "wait until it ends before continuing the chain",
                param="previous_response_id",
            )
        return await self.gw.responses.conversation(chain), chain[0].id

    # -- execute ---------------------------------------------------------------------------------

    async def execute(self, run: ResponseRun) -> None:
        """Run the loop to the end and record how it ended; raises HatchwayError if the run failed."""
        results: dict[str, ToolResult] = {}
        result: RunResult | None = None
        try:
            async for event in run.loop.events(run.conversation, run.ctx, stream=run.writer is not None):
                if isinstance(event, ToolCallFinished):
                    results[event.call.call_id] = event.result
                elif isinstance(event, RunFinished):
                    result = event.result
                if run.writer is not None:
                    run.writer.on_loop_event(event)
        except HatchwayError as exc:
            await self._fail(run, exc)
            raise
        except asyncio.CancelledError:
            await self._interrupted(run)
            raise
        assert result is not None
        await self._complete(run, result, results)

    async def run_background(self, run: ResponseRun) -> None:
        """The body of a background task: start (unless cancelled meanwhile), then execute."""
        try:
            if run.stored and not await self.gw.responses.start(run.record.id):
                await self._end_stream_as_stored(run)
                return
            run.record.status = "in_progress"
            if run.writer is not None:
                run.writer.lifecycle("response.in_progress", run.snapshot())
            await self.execute(run)
        except HatchwayError:
            return  # recorded as failed by execute()

    async def _complete(self, run: ResponseRun, result: RunResult, results: dict[str, ToolResult]) -> None:
        if run.writer is not None:
            run.writer.claim_message_ids(result.new_items)
        hosted = {
            c.call_id
            for c in result.new_items
            if isinstance(c, FunctionCall) and not run.router.is_client_call(c)
        }
        close_unanswered(result.new_items, hosted)
        output = output_records(result.new_items, hosted, results)
        outcome = outcome_of(result, output)
        await self._store(run, outcome)
        status = run.record.status
        http_status = 200 if status in ("completed", "incomplete") else 499
        self.gw.log_writer.submit(run.trace.to_record(http_status=http_status, result=result))
        if run.writer is not None:
            run.writer.finish(wire_items(run.output))
            run.writer.lifecycle(terminal_event(status), run.snapshot())
            run.writer.log.close()

    async def _fail(self, run: ResponseRun, exc: HatchwayError) -> None:
        error = error_object(exc, run.ctx)
        message = error["message"]
        await self._store(run, Outcome(status="failed", output=[], error=error))
        self.gw.log_writer.submit(run.trace.to_record(http_status=exc.status_code, error=message))
        if run.writer is not None:
            run.writer.error(exc.code, message, exc.param)
            run.writer.lifecycle("response.failed", run.snapshot())
            run.writer.log.close()

    async def _interrupted(self, run: ResponseRun) -> None:
        error = {"code": "server_error", "message": INTERRUPTED, "type": "interrupted"}
        await self._store(run, Outcome(status="failed", output=[], error=error))
        self.gw.log_writer.submit(run.trace.to_record(http_status=499, error=INTERRUPTED))
        await self._end_stream_as_stored(run)

    async def _end_stream_as_stored(self, run: ResponseRun) -> None:
        if run.writer is None or run.writer.log.closed:
            return
        if run.stored:
            run.record = await self.gw.responses.get(run.record.org_id, run.record.id)
        run.writer.lifecycle(terminal_event(run.record.status), run.snapshot())
        run.writer.log.close()

    async def _store(self, run: ResponseRun, outcome: Outcome) -> None:
        """Record the outcome; a response cancelled meanwhile stays cancelled (and keeps no output)."""
        if run.stored and not await self.gw.responses.finish(run.record.id, outcome):
            run.record = await self.gw.responses.get(run.record.org_id, run.record.id)
            return
        record = run.record
        record.status = outcome.status
        record.usage = outcome.usage
        record.error = outcome.error
        record.incomplete_details = outcome.incomplete_details
        record.completed_at = utcnow() if outcome.status == "completed" else None
        run.output = outcome.output

    # -- children (hosted spawn_subagent) ----------------------------------------------------------

    async def run_child(self, request: ChildRequest, parent: RunContext) -> ChildOutcome:
        """One stored child response of ``parent.response_id``, run to its end."""
        ctx = RunContext(
            principal=parent.principal,
            request_headers=parent.request_headers,
            on_behalf_of=parent.on_behalf_of,
            deadline=parent.deadline,
            depth=parent.depth + 1,
            secret_values=parent.secret_values,
        )
        body = CreateResponseRequest(
            model=request.model, instructions=request.instructions, input=request.task
        )
        run = await self.prepare(body, ctx, parent_response_id=parent.response_id, call_id=request.call_id)
        await self.execute(run)
        return ChildOutcome(response_id=run.record.id, output_text=output_text(run.output))


def error_object(exc: HatchwayError, ctx: RunContext | None = None) -> dict[str, Any]:
    """The stored ``error`` of a response that failed with ``exc`` (the run's secrets scrubbed)."""
    code = (
        "rate_limit_exceeded"
        if isinstance(exc, ProviderStatusError) and exc.upstream_status == 429
        else "server_error"
    )
    message = ctx.redact(exc.message) if ctx is not None else exc.message
    return {"code": code, "message": message, "type": exc.code, "param": exc.param}


def check_call_outputs(history: list[dict[str, Any]], input_records: list[dict[str, Any]]) -> None:
    """Every function_call_output answers a pending call, and no pending call is left unanswered."""
    pending = pending_client_calls(history)
    from_previous = set(pending)
    for record in input_records:
        if record["type"] == "function_call" and not record.get("hosted"):
            pending[record["call_id"]] = record
        elif record["type"] == "function_call_output" and not record.get("hosted"):
            if record["call_id"] not in pending:
                raise InvalidRequest(
                    f"input: no pending function call with call_id '{record['call_id']}' "
                    "(it must match a function_call of the previous response or of this input)",
                    param="input",
                    code="invalid_call_id",
                )
            pending.pop(record["call_id"])
    missing = [call_id for call_id in pending if call_id in from_previous]
    if missing:
        raise InvalidRequest(
            f"input: no function_call_output for call_id '{missing[0]}' of the previous response; "
            "send one for every function_call it returned",
            param="input",
            code="missing_call_output",
        )


def close_unanswered(new_items: list[Item], hosted: set[str]) -> None:
    """Give a hosted call that never ran (max_rounds) an output, so a chain replays validly."""
    answered = {i.call_id for i in new_items if isinstance(i, FunctionCallOutput)}
    for call_id in [c for c in hosted if c not in answered]:
        body = {"error": {"code": "not_run", "message": "The run ended before this tool call ran."}}
        new_items.append(FunctionCallOutput(call_id=call_id, output=orjson.dumps(body).decode()))


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


_INCOMPLETE = {
    "length": {"reason": "max_output_tokens"},
    "content_filter": {"reason": "content_filter"},
    "max_rounds": {"reason": "max_messages", "finish_reason": "max_rounds"},
    "timeout": {"reason": None, "finish_reason": "timeout"},
}


def outcome_of(result: RunResult, output: list[dict[str, Any]]) -> Outcome:
    incomplete = _INCOMPLETE.get(result.finish_reason)
    return Outcome(
        status="incomplete" if incomplete else "completed",
        output=output,
        usage=usage_object(result.usage),
        incomplete_details=incomplete,
    )
