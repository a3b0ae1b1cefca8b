"""Runs one response on the agent loop: prepare (chain, checks, plan, store), execute, record.

The same path serves a plain request, a streamed one, a background one, a queued one on a worker
and a subagent child; only where the events go (an ``EventLog`` or nowhere) and who awaits the run
differ. Every run happens inside its ``RunScope`` (``engine/run.py``), opened by ``open_scope``;
the runner tells the scope how the run ended, and the scope records it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, Item
from hatchway.engine.loop import AgentLoop, RunFinished, RunResult, ToolCallFinished
from hatchway.engine.plan import Planner, RunRequest
from hatchway.engine.run import CLIENT_GONE, RunScope, RunScopes
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.subagents import ChildRequest, ChildResult, ChildRunner
from hatchway.errors import HatchwayError, InternalError, InvalidRequest, ProviderStatusError
from hatchway.ids import new_id
from hatchway.limits.limiter import Admission
from hatchway.limits.scopes import CostEstimate, Requester, reserved_tokens
from hatchway.responses.chain import (
    check_call_outputs,
    close_unanswered,
    resolve_references,
    stored_conversation,
)
from hatchway.responses.compaction import open_compactions
from hatchway.responses.events import EventLog, ResponseStreamWriter, terminal_event
from hatchway.responses.items import item_of, output_records, output_text, split_namespaced, wire_items
from hatchway.responses.store import (
    ResponseEnding,
    ResponseJobRecord,
    ResponseRecord,
    ResponseStore,
    Resumable,
    stored_error,
)
from hatchway.responses.wire import CreateResponseRequest, parse_input, response_object, usage_object
from hatchway.store.tables import utcnow
from hatchway.tasks import CANCELLED_BY_REQUEST, DEADLINE_PASSED, TaskRegistry
from hatchway.vault import Vault

logger = logging.getLogger(__name__)
ROUTE = "responses"
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
    scope: RunScope
    writer: ResponseStreamWriter | None = None
    output: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The request's namespaced function tools: flat name → (namespace, name)."""
    failure: HatchwayError | None = None
    """What the run failed with, if it did (a stream that failed before any output answers it as
    the HTTP error it is)."""

    @property
    def ctx(self) -> RunContext:
        return self.scope.ctx

    def snapshot(self) -> dict[str, Any]:
        """The Response object as it stands (what lifecycle events carry)."""
        return response_object(self.record, self.output)


@dataclass(frozen=True, slots=True)
class StartedRun:
    """A response running as a task of this process, prepared: ``snapshot`` is what it was created as."""

    run: ResponseRun
    snapshot: dict[str, Any]
    task: asyncio.Task[None]

    @property
    def events(self) -> EventLog:
        assert self.run.writer is not None
        return self.run.writer.log


@dataclass(frozen=True, slots=True)
class Accepted:
    """A response's checked input, before it is planned and stored."""

    history: list[dict[str, Any]]
    input_records: list[dict[str, Any]]


class ResponseRunner:
    """Prepares and executes responses; also the hosted subagents' child runner."""

    def __init__(self, store: ResponseStore, planner: Planner, scopes: RunScopes, vault: Vault) -> None:
        self.store = store
        self.planner = planner
        self.scopes = scopes
        self.vault = vault
        self.remote: ChildRunner | None = None
        """The runner of ``a2a:<name>`` children (``a2a/remote.py``), when remote agents are configured."""
        self.resumable: Resumable | None = None
        """With the job queue: picks the background responses that, stopped with their replica, run
        again (they wait on an upstream MCP task) instead of failing ``interrupted``."""

    def open_scope(
        self, body: CreateResponseRequest, ctx: RunContext, *, parent_id: str | None = None
    ) -> RunScope:
        """The scope of a new response: its id is given to ``ctx`` now, so the record can name it."""
        ctx.response_id = ctx.response_id or new_id("resp")  # given already when admitted for the queue
        return self.scopes.open(
            ROUTE, ctx, model=body.model, response_id=ctx.response_id, parent_id=parent_id
        )

    # -- prepare ---------------------------------------------------------------------------------

    async def accept(
        self, body: CreateResponseRequest, ctx: RunContext, local_history: list[dict[str, Any]] | None = None
    ) -> Accepted:
        """The request's history and input, checked: a bad chain, compaction item or call output is a 4xx.

        ``local_history`` is a conversation held outside the store (a WebSocket's ``store: false``
        responses); it replaces the stored chain of ``previous_response_id``.
        """
        if local_history is None:
            history, root_id = await stored_conversation(
                self.store, ctx.org_id, body.previous_response_id, finished=True
            )
        else:
            history, root_id = local_history, None
        ctx.session_key = ctx.session_key or root_id or ctx.response_id
        records = await resolve_references(self.store, ctx.org_id, parse_input(body.input))
        input_records = await open_compactions(self.vault, ctx.org_id, records)
        check_call_outputs(history, input_records)
        return Accepted(history, input_records)

    async def prepare(
        self,
        body: CreateResponseRequest,
        scope: RunScope,
        *,
        call_id: str | None = None,
        local_history: list[dict[str, Any]] | None = None,
        events: EventLog | None = None,
        stored_with: Sequence[object] = (),
    ) -> ResponseRun:
        """Everything up to the first model call; raises HatchwayError for a bad request.
        ``stored_with``: rows stored with the response's record, in its transaction."""
        ctx = scope.ctx
        accepted = await self.accept(body, ctx, local_history)
        conversation, loop = await self._plan(body, scope, [*accepted.history, *accepted.input_records])
        record = self.new_record(body, ctx, call_id=call_id, parent_id=scope.parent_id)
        stored = body.store is not False
        if stored:
            if local_history is not None:
                # The previous response exists only on the socket: this one starts a stored chain
                # that carries the whole conversation, so it replays without the socket.
                record.previous_response_id = None
            await self.store.create(
                record,
                [*(local_history or []), *accepted.input_records],
                running=True,
                stored_with=stored_with,
            )
        writer = ResponseStreamWriter(events) if events is not None else None
        run = ResponseRun(record, stored, accepted.input_records, conversation, loop, scope, writer)
        run.namespaced = body.namespaced()
        return run

    def new_record(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        *,
        call_id: str | None = None,
        parent_id: str | None = None,
    ) -> ResponseRecord:
        assert ctx.response_id is not None
        now = utcnow()
        return ResponseRecord(
            id=ctx.response_id,
            org_id=ctx.org_id,
            status="queued" if body.background else "in_progress",
            model=body.model,
            request=body.echoed(),
            previous_response_id=body.previous_response_id,
            parent_response_id=parent_id,
            call_id=call_id,
            depth=ctx.depth,
            background=bool(body.background),
            on_behalf_of=ctx.on_behalf_of,
            created_at=now,
            updated_at=now,
        )

    async def store_queued(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        accepted: Accepted,
        job: ResponseJobRecord,
        stored_with: Sequence[object] = (),
    ) -> ResponseRecord:
        """Store a checked response for the job queue (a worker plans and runs it)."""
        record = self.new_record(body, ctx)
        await self.store.create(record, accepted.input_records, job=job, stored_with=stored_with)
        return record

    async def restore(
        self, body: CreateResponseRequest, scope: RunScope, record: ResponseRecord
    ) -> ResponseRun:
        """A stored response rebuilt from the database to run here (a worker of the job queue).

        ``scope.ctx`` carries who asked and the request headers; history and input come from the
        store. A plan that fails now (a secret deleted meanwhile…) fails the response, as it would
        have failed the request at creation.
        """
        ctx = scope.ctx
        ctx.response_id = record.id
        input_records = await self.store.items(record.id, "input")
        try:
            history, root_id = await stored_conversation(self.store, ctx.org_id, body.previous_response_id)
            ctx.session_key = ctx.session_key or root_id or ctx.response_id
            conversation, loop = await self._plan(body, scope, [*history, *input_records])
        except HatchwayError as exc:
            await self.store.finish(
                record.id, ResponseEnding(status="failed", output=[], error=error_object(exc, ctx))
            )
            raise
        run = ResponseRun(record, True, input_records, conversation, loop, scope)
        run.namespaced = body.namespaced()
        return run

    async def _plan(
        self, body: CreateResponseRequest, scope: RunScope, records: list[dict[str, Any]]
    ) -> tuple[list[Item], AgentLoop]:
        """The conversation for the model and the loop (history + input records)."""
        request = RunRequest(
            model=body.model,
            items=[item_of(r) for r in records],
            instructions=body.instructions,
            client_tools=body.client_tools(),
            tool_choice=body.upstream_tool_choice(),
            parallel_tool_calls=body.parallel_tool_calls,
            params=body.upstream_params(),
            children=self,
            max_tool_calls=body.max_tool_calls,
            # A response's output keeps the messages of its tool rounds, and its stream shows each
            # gateway call as an mcp_call item: the text of those rounds streams too, in order.
            stream_tool_round_text=True,
        )
        prepared = await self.planner.prepare(request, scope)
        return prepared.conversation, prepared.loop

    # -- start as a task --------------------------------------------------------------------------

    async def start(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        tasks: TaskRegistry,
        *,
        local_history: list[dict[str, Any]] | None = None,
        error_events: bool = True,
        body_bytes: int = 0,
        stored_with: Sequence[object] = (),
    ) -> StartedRun:
        """Run a response as a task of this process (a stream, a WebSocket turn, a background response
        without the job queue) and return once it is admitted, prepared and its first events are out.

        The whole run — admission and preparation included — happens in the task, inside its scope,
        so it ends, is recorded and gives its hold on the limits back however it ends. A bad request
        raises here (4xx), as ``prepare`` would, and so does a refusal of the limits (429).
        ``stored_with``: as ``prepare``'s.
        """
        scope = self.open_scope(body, ctx)
        events = EventLog()
        ready: asyncio.Future[tuple[ResponseRun, dict[str, Any]]] = asyncio.get_running_loop().create_future()
        assert scope.response_id is not None
        run_task = self._run_task(
            body, scope, events, ready, local_history, error_events, body_bytes, stored_with
        )
        task = tasks.spawn(scope.response_id, run_task, attachment=events)
        try:
            run, snapshot = await ready
        except asyncio.CancelledError:
            task.cancel()  # whoever started it is gone before it began: nobody follows it
            raise
        return StartedRun(run, snapshot, task)

    async def _run_task(
        self,
        body: CreateResponseRequest,
        scope: RunScope,
        events: EventLog,
        ready: asyncio.Future[tuple[ResponseRun, dict[str, Any]]],
        local_history: list[dict[str, Any]] | None,
        error_events: bool,
        body_bytes: int,
        stored_with: Sequence[object],
    ) -> None:
        try:
            async with scope:
                try:
                    await admit_response(scope, body, body_bytes)
                    run = await self.prepare(
                        body, scope, local_history=local_history, events=events, stored_with=stored_with
                    )
                except BaseException as exc:
                    _settle(ready, exc)
                    raise
                assert run.writer is not None
                run.writer.error_events = error_events
                snapshot = run.snapshot()
                run.writer.lifecycle("response.created", snapshot)
                run.writer.lifecycle(
                    "response.queued" if body.background else "response.in_progress", snapshot
                )
                ready.set_result((run, snapshot))
                if body.background:
                    await self.run_background(run, started=True)
                else:
                    await self.execute(run)
        except HatchwayError:
            return  # recorded by the scope; the caller (preparation) or the stream (the run) has it

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
        except asyncio.CancelledError as stopped:
            if not await self._queued_again(run, stopped):
                await self._interrupted(run)
            raise
        except Exception:  # a bug: the response fails (never left in_progress); the scope logs 500
            await self._fail(run, InternalError())
            raise
        assert result is not None
        await self._complete(run, result, results)

    async def run_background(self, run: ResponseRun, *, started: bool = False) -> None:
        """A background response: start it (unless it was cancelled meanwhile), then execute it.
        ``started``: stored as running by this process already (``prepare``); a cancel meanwhile
        cancels its task."""
        if run.stored and not started and not await self.store.start(run.record.id):
            run.scope.end(CLIENT_GONE, error="The response was cancelled before it started.")
            await self._end_stream_as_stored(run)
            return
        run.record.status = "in_progress"
        run.ctx.waits_for_approval = True  # nobody holds a connection open: it may wait for approvers
        if run.writer is not None:
            run.writer.lifecycle("response.in_progress", run.snapshot())
        await self.execute(run)

    async def _complete(self, run: ResponseRun, result: RunResult, results: dict[str, ToolResult]) -> None:
        if run.writer is not None:
            run.writer.claim_message_ids(result.new_items)
        hosted = {
            c.call_id
            for c in result.new_items
            if isinstance(c, FunctionCall) and not run.loop.router.is_client_call(c)
        }
        close_unanswered(result.new_items, hosted)
        output = output_records(result.new_items, hosted, results)
        split_namespaced(output, run.namespaced)
        await self._store(run, ending_of(result, output))
        status = run.record.status
        run.scope.end(200 if status in ("completed", "incomplete") else CLIENT_GONE, result)
        if run.writer is not None:
            run.writer.finish(wire_items(run.output))
            run.writer.lifecycle(terminal_event(status), run.snapshot())
            run.writer.log.close()

    async def _fail(self, run: ResponseRun, exc: HatchwayError) -> None:
        error = error_object(exc, run.ctx)
        message = error["message"]
        await self._store(run, ResponseEnding(status="failed", output=[], error=error))
        run.scope.end(exc.status_code, error=message)
        run.failure = exc
        if run.writer is not None:
            run.writer.error(exc.code, message, exc.param, error_type=exc.error_type)
            run.writer.lifecycle("response.failed", run.snapshot())
            run.writer.log.close()

    async def _queued_again(self, run: ResponseRun, stopped: asyncio.CancelledError) -> bool:
        """A background run its replica stopped (not one someone cancelled) while its call waited
        on an upstream MCP task: queued again, to poll the same task on the next take."""
        if self.resumable is None or not run.record.background or not run.stored:
            return False
        if CANCELLED_BY_REQUEST in stopped.args or DEADLINE_PASSED in stopped.args:
            return False
        try:
            again = await asyncio.shield(self.resumable([run.record.id]))
            if not again or not await asyncio.shield(self.store.queue_again(again)):
                return False
        except Exception:  # the database is going away with the replica: the lease decides later
            logger.warning("could not queue response %s again", run.record.id, exc_info=True)
            return False
        run.scope.end(CLIENT_GONE, error="The replica stopped; the response was queued again.")
        if run.writer is not None and not run.writer.log.closed:
            run.writer.log.close()
        return True

    async def _interrupted(self, run: ResponseRun) -> None:
        error = stored_error("server_error", INTERRUPTED, "interrupted")
        run.scope.end(CLIENT_GONE, error=INTERRUPTED)
        await self._store(run, ResponseEnding(status="failed", output=[], error=error))
        await self._end_stream_as_stored(run)

    async def _end_stream_as_stored(self, run: ResponseRun) -> None:
        if run.writer is None or run.writer.log.closed:
            return
        if run.stored:
            run.record = await self.store.get(run.record.org_id, run.record.id)
        run.writer.lifecycle(terminal_event(run.record.status), run.snapshot())
        run.writer.log.close()

    async def _store(self, run: ResponseRun, ending: ResponseEnding) -> None:
        """Record the ending; a response cancelled meanwhile stays cancelled (and keeps no output)."""
        if run.stored and not await self.store.finish(run.record.id, ending):
            run.record = await self.store.get(run.record.org_id, run.record.id)
            return
        record = run.record
        record.status = ending.status
        record.usage = ending.usage
        record.error = ending.error
        record.incomplete_details = ending.incomplete_details
        record.completed_at = utcnow() if ending.status == "completed" else None
        run.output = ending.output

    # -- children (hosted spawn_subagent) ----------------------------------------------------------

    async def run_child(self, request: ChildRequest, ctx: RunContext) -> ChildResult:
        """One stored child response of ``request.parent_response_id``, run to its end in its own scope
        (a remote A2A agent's, ``a2a:<name>``, by ``self.remote``)."""
        remote = self.remote
        if request.model.startswith("a2a:") and remote is None:
            raise InvalidRequest(f"{request.model}: no remote A2A agents are configured (a2a.remote_agents)")
        body = CreateResponseRequest(
            model=request.model, instructions=request.instructions, input=request.task
        )
        async with self.open_scope(body, ctx, parent_id=request.parent_response_id) as scope:
            if remote is not None and request.model.startswith("a2a:"):
                # The remote agent's work is a run of its own too: its run-log record, its span,
                # how it ended (its usage is the remote's, which it does not report).
                scope.begin(name=request.model, agent=None, plugin_source=None)
                child = await remote.run_child(request, ctx)
                scope.end(200)
                return child
            run = await self.prepare(body, scope, call_id=request.call_id)
            await self.execute(run)
        return ChildResult(response_id=run.record.id, output_text=output_text(run.output))


async def admit_response(
    scope: RunScope, body: CreateResponseRequest, body_bytes: int, *, lease: str | None = None
) -> Admission:
    """A response's hold on the limits, taken in its scope (settled when it closes): who asks, for
    which model, in the background or not, reserving what its answer may use. ``lease``: a queued
    response's own id, under which the worker that runs it takes the hold over."""
    ctx = scope.ctx
    who = Requester.of(ctx.principal, ctx.on_behalf_of, body.model, background=bool(body.background))
    reserve = reserved_tokens(body.max_output_tokens, body_bytes)
    estimate = CostEstimate.of(body.model, body.max_output_tokens, body_bytes)
    return await scope.admit(who, reserve_tokens=reserve, estimate=estimate, lease=lease)


def _settle(ready: asyncio.Future[Any], exc: BaseException) -> None:
    if ready.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        ready.cancel()
    else:
        ready.set_exception(exc)


RESPONSE_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)
"""The codes of OpenAI's ``ResponseError`` (``code`` is one of these in its schema)."""


def error_object(exc: HatchwayError, ctx: RunContext | None = None) -> dict[str, Any]:
    """The stored ``error`` of a response that failed with ``exc`` (the run's secrets scrubbed):
    what the upstream reported when it was the upstream (its code, when OpenAI's list has it)."""
    message = ctx.redact(exc.message) if ctx is not None else exc.message
    code = "server_error"
    error_type = exc.error_type
    if isinstance(exc, ProviderStatusError):
        upstream = (exc.body or {}).get("error") if isinstance(exc.body, dict) else None
        reported = upstream.get("code") if isinstance(upstream, dict) else None
        if reported in RESPONSE_ERROR_CODES:
            code = reported
        elif exc.upstream_status == 429:
            code = "rate_limit_exceeded"
        if isinstance(upstream, dict) and isinstance(upstream.get("type"), str) and exc.upstream_status < 500:
            error_type = upstream["type"]
    error = stored_error(code, message, exc.code or "server_error", error_type)
    error["param"] = exc.param
    return error


_INCOMPLETE: dict[str, dict[str, Any]] = {
    "length": {"reason": "max_output_tokens"},
    "content_filter": {"reason": "content_filter"},
    "max_rounds": {"reason": "max_messages", "finish_reason": "max_rounds"},
    "timeout": {"reason": None, "finish_reason": "timeout"},
}


def ending_of(result: RunResult, output: list[dict[str, Any]]) -> ResponseEnding:
    incomplete = _INCOMPLETE.get(result.finish_reason)
    return ResponseEnding(
        status="incomplete" if incomplete else "completed",
        output=output,
        usage=usage_object(result.usage),
        incomplete_details=incomplete,
    )
