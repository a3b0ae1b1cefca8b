"""A tool call the server runs as an MCP task, followed to its end — durably.

``PluginMcpClient.call`` sends ``tools/call`` declaring the tasks extension when the server has it
(``McpServerConfig.tasks``); a server that answers with a task (``CreateTaskResult``) hands the call
to ``TaskFollower.follow``:

- the task is recorded first (``task_ledger.py``: the run's response, the call, the upstream id),
  so a background response whose replica dies is queued again and, running on another replica,
  finds the open task of the same call (``TaskLedger.open_call``) and polls it — the tool is never
  called twice;
- ``tasks/get`` every ``pollIntervalMs`` (clamped to ``mcp_tasks.min_poll_ms`` …
  ``max_poll_ms``), each poll an attempt with the server's timeout and retries; every change of
  status is a ``task`` step of the run log and, with a ``progress`` callback (an MCP endpoint's
  client), a progress notification carrying the status message;
- ``input_required``: the task's ``inputRequests`` are a round of input like MRTR's
  (``inputs.py``): the gateway's answerer asks the end user (``questions.py``, the task's id kept
  with the question), and the answer, on the user's next turn, is sent with ``tasks/update`` and
  the task followed again;
- the wait: a chat request's (or a foreground response's) call waits no longer than its run's
  deadline, a client holds the connection; a background response's waits up to
  ``mcp_tasks.background_wait_seconds``, the time not counted against its run (the deadline moves);
  past it the task is cancelled and the call fails ``tool_timeout``;
- cancelled: when the run's response is cancelled (or its chat client left), ``tasks/cancel`` is
  sent; when the replica stops or is killed, the task is left running for the run that resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types
from pydantic import ConfigDict, ValidationError

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.engine.run_log import InputRoundStep, TaskStep
from hatchway.engine.tools.mcp.calls import McpCallResult
from hatchway.engine.tools.mcp.inputs import InputRound
from hatchway.engine.tools.mcp.results import to_call_result
from hatchway.engine.tools.mcp.task_ledger import OPEN, CallIdentity, TaskLedger, server_ref
from hatchway.engine.tools.mcp.tasks import (
    TERMINAL,
    DetailedTask,
    cancel_task,
    get_task,
    input_requests_of,
    update_task,
)
from hatchway.errors import McpServerError, ToolError, ToolTimeout
from hatchway.tasks import CANCELLED_BY_REQUEST, DEADLINE_PASSED

if TYPE_CHECKING:
    from hatchway.config.settings import McpTaskSettings


class TaskClient(Protocol):
    """What following a task needs of the plugin's client (``PluginMcpClient``)."""

    answerer: Any
    sampler: Any

    async def request(self, server: McpServerConfig, ctx: RunContext, send: Any) -> Any: ...


logger = logging.getLogger(__name__)

_CANCEL_SECONDS = 5.0
MAX_TASK_ROUNDS = 10
"""Rounds of input one task may ask for (as MRTR's ``MAX_INPUT_ROUNDS``)."""

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


class _Ack(types.Result):
    model_config = ConfigDict(extra="allow")


@dataclass(slots=True)
class FollowedTask:
    """A task being followed: its row in the ledger (None without one) and the upstream's id."""

    upstream_id: str
    record_id: str | None
    poll_ms: int | None
    status: str = "working"
    round: int = 0


class TaskFollower:
    """Follows one plugin client's tasks; satisfies nothing, used by ``PluginMcpClient``."""

    def __init__(
        self,
        client: TaskClient,
        ledger: TaskLedger | None,
        settings: McpTaskSettings,
        *,
        resumes: bool = False,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.settings = settings
        self.resumes = resumes and ledger is not None
        """A background run stopped with its replica runs again (the job queue) and polls its tasks:
        they are left running then; otherwise a run that stops cancels them."""

    def identity(
        self, server: McpServerConfig, tool: str, arguments: dict[str, Any], ctx: RunContext
    ) -> CallIdentity | None:
        """This call as a stored response runs it (None for a run that is not one: nothing resumes it)."""
        if self.ledger is None or ctx.response_id is None:
            return None
        ref = server_ref(server.url or server.command)
        counts = ctx.run.call_occurrences
        seen_key = f"{ref}\x00{tool}"
        counts[seen_key] = counts.get(seen_key, 0) + 1
        return CallIdentity(ctx.org_id, ctx.response_id, server.id, ref, tool, arguments, counts[seen_key])

    async def resumable(self, call: CallIdentity | None) -> FollowedTask | None:
        """The task an earlier run of the same response started for this call, still open."""
        if call is None or self.ledger is None:
            return None
        row = await self.ledger.open_call(call)
        if row is None or row.upstream_task_id is None:
            return None
        logger.info("MCP task %s of %s/%s: resumed by a new run", row.id, row.server_id, row.tool)
        return FollowedTask(row.upstream_task_id, row.id, row.poll_interval_ms, row.status)

    async def by_id(self, record_id: str, ctx: RunContext) -> FollowedTask | None:
        """The organisation's open task ``record_id`` (a question's), or None."""
        if self.ledger is None:
            return None
        row = await self.ledger.client_task(record_id, ctx.org_id)
        if row is None or row.upstream_task_id is None or row.status not in OPEN:
            return None
        return FollowedTask(row.upstream_task_id, row.id, row.poll_interval_ms, row.status)

    async def started(
        self, server: McpServerConfig, tool: str, call: CallIdentity | None, created: Any, ctx: RunContext
    ) -> FollowedTask:
        record_id = None
        # The server's words, like every later status: a known status, its message redacted and cut.
        status = created.status if created.status in OPEN else "working"
        message = ctx.redact(created.status_message)[:500] if created.status_message else None
        poll_ms = self._suggested(created.poll_interval_ms)
        if self.ledger is not None:
            record_id = await self.ledger.record_call(
                call,
                org_id=ctx.org_id,
                server_id=server.id,
                ref=server_ref(server.url or server.command),
                tool=tool,
                upstream_task_id=created.task_id,
                status=status,
                poll_interval_ms=poll_ms,
                end_user=ctx.on_behalf_of,
            )
        ctx.run.report(TaskStep(server.id, tool, status, message))
        return FollowedTask(created.task_id, record_id, poll_ms, status)

    async def abandon(self, server: McpServerConfig, created: Any, ctx: RunContext) -> None:
        """A task the call did not ask for (it did not declare the extension): cancelled, never followed."""
        await self._cancel(server, FollowedTask(created.task_id, None, None), ctx)

    async def follow(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        task: FollowedTask,
        ctx: RunContext,
        *,
        input_responses: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> McpCallResult:
        """Poll ``task`` to its end and return the tool's result; raises ToolError (``InputRequested``
        when the end user must answer first, the task then left waiting for that answer)."""
        budget = self.settings.background_wait_seconds if ctx.waits_for_approval else 0.0
        started = time.monotonic()
        ctx.extend_deadline(budget)
        try:
            if input_responses is not None:
                await self._update(server, task, input_responses, ctx)
            return await self._poll(server, tool, arguments, task, ctx, progress)
        except asyncio.CancelledError as cancelled:
            if _by_request(cancelled) or not (self.resumes and _resumable(ctx)):
                await self._cancel(server, task, ctx)
            raise
        except (ToolTimeout, McpServerError) as failed:
            # Past the wait, or an answer that is not the task: nobody follows it any more. (Not
            # InputRequested: that task waits for its end user's answer.)
            if isinstance(failed, ToolTimeout) or failed.code == "mcp_protocol_error":
                await self._cancel(server, task, ctx)
            raise
        finally:
            ctx.extend_deadline(time.monotonic() - started - budget)

    async def _poll(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        task: FollowedTask,
        ctx: RunContext,
        progress: Progress | None,
    ) -> McpCallResult:
        polls = 0
        while True:
            if ctx.remaining() <= 0:
                raise ToolTimeout(
                    f"{server.id}: the tool's task {task.upstream_id} did not end in time "
                    f"(status {task.status}); it was cancelled",
                    code="tool_timeout",
                )
            detailed = await self._get(server, task, ctx)
            polls += 1
            if detailed.poll_interval_ms is not None:
                task.poll_ms = self._suggested(detailed.poll_interval_ms)
            if detailed.status != task.status or polls == 1:
                await self._saw(server, tool, task, detailed, ctx, progress)
            if detailed.status == "completed":
                return self._completed(server, detailed)
            if detailed.status == "failed":
                error = detailed.error or {}
                message = str(error.get("message") or detailed.status_message or "no reason given")[:500]
                raise McpServerError(
                    f"{server.id}: the tool's task failed: {message}", code="mcp_task_failed"
                )
            if detailed.status == "cancelled":
                raise ToolError(
                    f"{server.id}: the server cancelled the tool's task", code="mcp_task_cancelled"
                )
            if detailed.status == "input_required" and detailed.input_requests:
                await self._answer(server, tool, arguments, task, detailed, ctx)
                continue  # the answer may have moved it on: look again at once
            await asyncio.sleep(self._interval(task, ctx))

    def _suggested(self, poll_ms: int | None) -> int | None:
        """The server's ``pollIntervalMs`` within ``min_poll_ms`` … ``max_poll_ms`` (it is stored)."""
        if poll_ms is None:
            return None
        return min(max(poll_ms, self.settings.min_poll_ms), self.settings.max_poll_ms)

    def _interval(self, task: FollowedTask, ctx: RunContext) -> float:
        ms = self._suggested(task.poll_ms) or self.settings.min_poll_ms
        return max(min(ms / 1000, ctx.remaining()), 0.0)

    async def _saw(
        self,
        server: McpServerConfig,
        tool: str,
        task: FollowedTask,
        detailed: DetailedTask,
        ctx: RunContext,
        progress: Progress | None,
    ) -> None:
        task.status = detailed.status
        message = ctx.redact(detailed.status_message)[:500] if detailed.status_message else None
        if detailed.status not in TERMINAL:  # the terminal step is the call's own outcome
            ctx.run.report(TaskStep(server.id, tool, detailed.status, message))
        if self.ledger is not None and task.record_id is not None:
            await self.ledger.set_status(task.record_id, detailed.status, message)
        if progress is not None and detailed.status not in TERMINAL:
            with contextlib.suppress(Exception):  # a client gone from the stream stops nothing here
                await progress(0.0, None, f"task {detailed.status}" + (f": {message}" if message else ""))

    def _completed(self, server: McpServerConfig, detailed: DetailedTask) -> McpCallResult:
        try:
            result = types.CallToolResult.model_validate(detailed.result or {})
        except ValidationError:
            raise McpServerError(
                f"{server.id}: the tool's task completed with a result that is not a tool result",
                code="mcp_protocol_error",
            ) from None
        return to_call_result(result)

    async def _answer(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        task: FollowedTask,
        detailed: DetailedTask,
        ctx: RunContext,
    ) -> None:
        task.round += 1
        if task.round > MAX_TASK_ROUNDS:
            raise ToolError(
                f"{server.id}: the tool's task kept asking for input after {MAX_TASK_ROUNDS} rounds",
                code="mcp_input_rounds_exceeded",
            )
        try:
            requests = input_requests_of(detailed)
        except ValidationError:
            raise McpServerError(
                f"{server.id}: the tool's task asked for input in a form this client does not know",
                code="mcp_protocol_error",
            ) from None
        round_ = InputRound(
            server.id,
            tool,
            task.round,
            requests,
            None,
            arguments=arguments,
            ctx=ctx,
            server_url=server.url or server.command,
            sampler=self.client.sampler,
            task_id=task.record_id or task.upstream_id,
        )
        ctx.run.report(InputRoundStep(server.id, tool, task.round, asked=tuple(sorted(_methods(requests)))))
        answerer = self.client.answerer
        if answerer is None:
            raise ToolError(
                f"{server.id}: the tool's task asked for input, which this gateway cannot answer here",
                code="mcp_input_unsupported",
            )
        responses = await answerer.answer(round_)  # InputRequested: the end user answers next turn
        await self._update(server, task, responses, ctx)

    async def _get(self, server: McpServerConfig, task: FollowedTask, ctx: RunContext) -> DetailedTask:
        async def send(client: Any) -> DetailedTask:
            return await client.session.send_request(get_task(task.upstream_id), DetailedTask)  # type: ignore[no-any-return]

        try:
            detailed: DetailedTask = await self.client.request(server, ctx, send)
        except ValidationError:
            raise McpServerError(
                f"{server.id}: tasks/get answered with something that is not a task",
                code="mcp_protocol_error",
            ) from None
        if detailed.task_id != task.upstream_id:
            raise McpServerError(
                f"{server.id}: tasks/get answered for another task than the one asked",
                code="mcp_protocol_error",
            )
        return detailed

    async def _update(
        self, server: McpServerConfig, task: FollowedTask, responses: dict[str, Any], ctx: RunContext
    ) -> None:
        async def send(client: Any) -> Any:
            return await client.session.send_request(update_task(task.upstream_id, responses), _Ack)

        await self.client.request(server, ctx, send)
        task.status = "working"

    async def _cancel(self, server: McpServerConfig, task: FollowedTask, ctx: RunContext) -> None:
        """Best effort, shielded from the cancellation that asked for it, bounded in time."""

        async def send(client: Any) -> Any:
            return await client.session.send_request(cancel_task(task.upstream_id), _Ack)

        async def cancel() -> None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CANCEL_SECONDS):
                    await self.client.request(server, _grace(ctx), send)
            if self.ledger is not None and task.record_id is not None:
                with contextlib.suppress(Exception):
                    await self.ledger.set_status(task.record_id, "cancelled")

        with contextlib.suppress(BaseException):
            await asyncio.shield(asyncio.ensure_future(cancel()))


def _grace(ctx: RunContext) -> RunContext:
    """``ctx`` with a few seconds left even past its deadline: the cancel must still be sent."""
    if ctx.remaining() >= _CANCEL_SECONDS:
        return ctx
    from dataclasses import replace

    return replace(ctx, deadline=time.monotonic() + _CANCEL_SECONDS)


def _by_request(cancelled: asyncio.CancelledError) -> bool:
    return any(arg in (CANCELLED_BY_REQUEST, DEADLINE_PASSED) for arg in cancelled.args)


def _resumable(ctx: RunContext) -> bool:
    """A background response runs again after its replica stops; nothing resumes anything else."""
    return ctx.response_id is not None and ctx.waits_for_approval


def _methods(requests: dict[str, Any]) -> set[str]:
    return {getattr(request, "method", "?") for request in requests.values()}
