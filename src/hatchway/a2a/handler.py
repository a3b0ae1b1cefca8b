"""``AgentTasks``: the A2A SDK's ``RequestHandler`` over Hatchway's Responses lifecycle, for one
published agent.

The SDK parses and answers both bindings (JSON-RPC, HTTP+JSON) and streams; this class decides what
each method means here. A task is a background response of ``agent:<name>`` (stored, so it survives
a restart, runs on any worker, is read and cancelled from any replica); its context is the chain of
the responses of the same ``contextId``. Who asks comes from the API layer, already authenticated
(``Caller`` in the call context's state): tasks are per organisation and end user.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any, Protocol

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from hatchway.a2a.caller import Caller, caller_of
from hatchway.a2a.push import PushNotifier
from hatchway.a2a.push_methods import TaskPushes
from hatchway.a2a.store import A2ATaskRecord, A2ATasks, Cursor, StateFilter, new_context_id
from hatchway.a2a.streams import StreamSlots
from hatchway.a2a.tasks import (
    ENDED,
    FILTERS,
    TERMINAL_EVENTS,
    WAITING,
    answer_text,
    input_of,
    state_of,
    status_update,
    task_of,
    text_update,
)
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.errors import Conflict, HatchwayError, InvalidRequest, NotFound
from hatchway.ids import new_id
from hatchway.responses.events import EventLog
from hatchway.responses.runs import ResponseRun
from hatchway.responses.service import Responses
from hatchway.responses.store import ACTIVE, ResponseRecord
from hatchway.responses.wire import CreateResponseRequest

Begun = tuple[A2ATaskRecord, ResponseRecord | None, EventLog | None, ResponseRun | None]
"""What a message started: its task, the task's response, and when it runs here its events and run."""

logger = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


class AgentTasks(TaskPushes, RequestHandler):
    def __init__(
        self,
        agent: str,
        responses: Responses,
        tasks: A2ATasks,
        operations: OperationStore,
        *,
        asks: bool = True,
        streams: StreamSlots,
        push: PushNotifier | None = None,
        base_url: str | None = None,
    ) -> None:
        """``asks``: the agent has transactional operations (tools.yaml), so a run may end asking
        for a confirmation; without them no task is ever input-required and nobody looks.
        ``push``: push notifications (``push.py``); without it every push method is refused.
        ``streams``: the open streams each organisation may hold (shared by every agent)."""
        self.asks = asks
        self.streams = streams
        self.push = push
        self.base_url = base_url
        """The gateway's public address: its consent links start with it (auth-required)."""
        self.agent = agent
        self.model = f"agent:{agent}"
        self.responses = responses
        self.tasks = tasks
        self.operations = operations

    # -- messages -------------------------------------------------------------------------------

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task | Message:
        """A new task, answered when it ends (or at once with ``returnImmediately``)."""
        caller = caller_of(context)
        task, response, events, run = await self._start(params, caller)
        if response is not None and not params.configuration.return_immediately:
            async for _ in self._events(response, events):
                pass  # the run's events: their end is the task's
            if run is not None and run.record.status not in ACTIVE and not self.asks:
                # Ran here: the Task is built from the run as it ended (what the store now holds),
                # without reading it back.
                return task_of(
                    task,
                    run.record,
                    inputs=run.input_records,
                    outputs=run.output,
                    history_length=_history_length(params),
                    base_url=self.base_url,
                )
        return await self._task(caller, task, history_length=_history_length(params))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task at once, then its state and its answer as they change, until it ends."""
        caller = caller_of(context)
        with self.streams.hold(caller.org_id):  # before the task starts: a refused stream starts none
            task, response, events, _run = await self._start(params, caller)
            yield await self._task(caller, task, history_length=_history_length(params))
            if response is not None:
                async for event in self._updates(caller, task, response, events):
                    yield event

    # -- tasks ----------------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        caller = caller_of(context)
        _check_history_length(params)
        task = await self._owned(caller, params.id)
        length = params.history_length if params.HasField("history_length") else None
        return await self._task(caller, task, history_length=length)

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks of this agent, most recently updated first, a cursor's page at a time;
        ``status`` and ``statusTimestampAfter`` filter before the page is cut (``totalSize`` counts
        every match)."""
        caller = caller_of(context)
        _check_history_length(params)
        size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise InvalidParamsError(message=f"pageSize: between 1 and {MAX_PAGE_SIZE}")
        before = _cursor_of(params.page_token) if params.page_token else None
        # A number past the enum is refused; a name past it the SDK has already read as unspecified.
        if params.status not in TaskState.values():
            raise InvalidParamsError(message="status: not a TaskState")
        state = None
        if params.status != TaskState.TASK_STATE_UNSPECIFIED:
            state = FILTERS.get(params.status, StateFilter())  # auth-required: none yet
        after = (
            params.status_timestamp_after.ToDatetime(tzinfo=UTC)
            if params.HasField("status_timestamp_after")
            else None
        )
        rows, total, more = await self.tasks.page(
            caller.org_id,
            self.agent,
            caller.end_user,
            context_id=params.context_id or None,
            state=state,
            updated_after=after,
            before=before,
            limit=size,
        )
        length = params.history_length if params.HasField("history_length") else 0
        found = [
            await self._task(caller, row, history_length=length, include_artifacts=params.include_artifacts)
            for row in rows
        ]
        return ListTasksResponse(
            tasks=found,
            next_page_token=_token_of(more) if more is not None else "",
            page_size=len(found),  # the tasks on this page (a2a-java's reading; the TCK checks it)
            total_size=total,
        )

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        caller = caller_of(context)
        task = await self._owned(caller, params.id)
        response = await self.responses.get(caller.org_id, task.response_id) if task.response_id else None
        if response is not None and response.status == "completed" and task.refusal is None:
            pending = await self.operations.awaiting_from(caller.org_id, [response.id])
            if response.id in pending:  # input-required: its question is withdrawn, nothing runs
                reason = "cancelled over A2A while it asked for confirmation"
                if not await self.operations.cancel(pending[response.id].id, reason, org_id=caller.org_id):
                    raise TaskNotCancelableError(message=f"task {task.id}: its operation was just confirmed")
                await self.tasks.cancel_asking(task.id, reason)
                return await self._withdrawn(caller, task.id)
            snapshot = await self._task(caller, task, history_length=0)
            if snapshot.status.state == TaskState.TASK_STATE_AUTH_REQUIRED:  # nothing ran: it stops here
                await self.tasks.cancel_asking(
                    task.id, "cancelled over A2A while it waited for authorization"
                )
                return await self._withdrawn(caller, task.id)
        if response is None or response.status not in ACTIVE:
            state = TaskState.Name(state_of(task, response))
            raise TaskNotCancelableError(message=f"task {task.id} has already ended ({state})")
        try:
            await self.responses.cancel(caller.org_id, response.id)
        except Conflict as exc:
            raise TaskNotCancelableError(message=exc.message) from None
        return await self._task(caller, task)

    async def _withdrawn(self, caller: Caller, task_id: str) -> Task:
        """A waiting task just cancelled: announced as it is now (the record after the cancel, so
        its watcher is a new one even while the question's own announcement is still being sent)."""
        task = await self._owned(caller, task_id)
        if self.push is not None:
            await self.push.configs.reopen(task.id)
        self._watch(task)
        return await self._task(caller, task)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it is now, then its changes until it ends (from any replica: a response
        running elsewhere is followed through the store)."""
        caller = caller_of(context)
        task = await self._owned(caller, params.id)
        snapshot = await self._task(caller, task)
        if snapshot.status.state in ENDED:  # A2A 3.1.6: a task in a terminal state has no stream
            raise UnsupportedOperationError(
                message=f"task {task.id} has already ended ({TaskState.Name(snapshot.status.state)})"
            )
        with self.streams.hold(caller.org_id):
            yield snapshot
            assert task.response_id is not None
            response = await self.responses.get(caller.org_id, task.response_id)
            async for event in self._updates(caller, task, response):
                yield event

    # -- what this server does not offer (its card says so) ------------------------------------

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        # A2A 3.3.4: the card says extendedAgentCard: false, so the operation is unsupported (the
        # not-configured error is for an agent that declares one).
        raise UnsupportedOperationError(message="this agent has no extended agent card")

    # -- the lifecycle --------------------------------------------------------------------------

    async def _start(self, params: SendMessageRequest, caller: Caller) -> Begun:
        """The task a message starts: a background response of the agent, after the context's last;
        with its run and its events when it runs here."""
        message = params.message
        _check_history_length(params.configuration)
        items = input_of(message)
        push = None
        if params.configuration.HasField("task_push_notification_config"):
            push = params.configuration.task_push_notification_config
            self._notifier()
            await self._check_push(push)  # before anything runs: a refused URL starts no task
        if message.task_id:
            answered = await self._answer(caller, message.task_id, items)
            await self._started(caller, answered[0], push)
            return answered
        context_id = message.context_id or new_context_id()
        previous = None
        if message.context_id:  # a new context has no task before this one
            previous = await self.tasks.latest_in_context(
                caller.org_id, self.agent, caller.end_user, context_id
            )
        if previous is not None and previous.response_id is not None:
            last = await self.responses.get(caller.org_id, previous.response_id)
            if last.status in ACTIVE:
                busy = f"context {context_id}: task {previous.id} is still working; wait for it or cancel it"
                raise InvalidParamsError(message=busy)
        # Stored with its response, in one transaction: no second write racing the run's.
        task = self.tasks.new(caller.org_id, self.agent, context_id, caller.end_user)
        refused, response, events, run = await self._run(caller, items, _last_answered(previous), task)
        if refused is not None:
            task = await self.tasks.add(
                caller.org_id,
                self.agent,
                context_id,
                caller.end_user,
                refusal={"state": "rejected", "message": refused},
            )
            await self._started(caller, task, push, new=True)
            return task, None, None, None
        assert response is not None and response.id == task.response_id
        await self._started(caller, task, push, new=True)
        return task, response, events, run

    async def _answer(self, caller: Caller, task_id: str, items: list[dict[str, Any]]) -> Begun:
        """The end user's answer to the question an input-required task asks: the conversation goes
        on (a new response after the task's), and the task follows it. The answer confirms or
        cancels the operation the question is about, as the same words would in a chat: bound to
        that end user's conversation and to the operation's arguments as asked."""
        task = await self._owned(caller, task_id)
        snapshot = await self._task(caller, task, history_length=0)
        if snapshot.status.state not in WAITING:
            state = TaskState.Name(snapshot.status.state)
            # A2A 1.0, 3.1.1: a task in a terminal state takes no more messages.
            raise UnsupportedOperationError(
                message=f"task {task.id} is {state}, not waiting for input; "
                "a new task of its contextId continues the conversation"
            )
        refused, response, events, run = await self._run(caller, items, task.response_id)
        if refused is not None:
            raise InvalidParamsError(message=refused)
        assert response is not None
        await self.tasks.set_response(task.id, response.id)
        task.response_id = response.id
        if self.push is not None:  # its configs are owed the new run's end
            await self.push.configs.reopen(task.id)
        return task, response, events, run

    async def _run(
        self,
        caller: Caller,
        items: list[dict[str, Any]],
        previous_response_id: str | None,
        task: A2ATaskRecord | None = None,
    ) -> tuple[str | None, ResponseRecord | None, EventLog | None, ResponseRun | None]:
        """A background response of the agent: (the refusal's reason, None, None, None) when a limit
        or a budget refuses it, else (None, the response, and its events and run when it runs in
        this process). A new ``task`` is stored with the response (and only if it is)."""
        body = CreateResponseRequest(
            model=self.model,
            input=items,
            background=True,
            store=True,
            previous_response_id=previous_response_id,
        )
        stored_with: list[object] = []
        if task is not None:
            caller.ctx.response_id = task.response_id = new_id("resp")
            stored_with.append(task)
        try:
            created = await self.responses.create(body, caller.ctx, stored_with=stored_with)
        except HatchwayError as exc:
            if exc.status_code in (402, 429):  # a limit or a budget: the task is refused, and says why
                return exc.message, None, None, None
            raise _a2a_error(exc) from None
        if created.started is not None:  # running here: its record, its live events, the run
            started = created.started
            return None, started.run.record, started.events, started.run
        return None, await self.responses.get(caller.org_id, created.response["id"]), None, None

    async def _updates(
        self, caller: Caller, task: A2ATaskRecord, response: ResponseRecord, events: EventLog | None = None
    ) -> AsyncGenerator[Event]:
        """Status and answer updates from the response's events, ending with its final state."""
        first = True
        async for event in self._events(response, events):
            kind = event.get("type")
            if kind == "response.in_progress":
                yield status_update(task, TaskState.TASK_STATE_WORKING)
            elif kind == "response.output_text.delta" and event.get("delta"):
                yield text_update(task, event["delta"], first=first)
                first = False
        final = await self._task(caller, task)
        message = final.status.message.parts[0].text if final.status.message.parts else None
        yield status_update(task, final.status.state, message)

    async def _events(
        self, response: ResponseRecord, events: EventLog | None = None
    ) -> AsyncGenerator[dict[str, Any]]:
        """The run's events to its end: from its log when it runs here (kept by reference, so a run
        that already ended replays at once), else followed through the store."""
        source = events.follow() if events is not None else self.responses.follow(response, None)
        async for event in source:
            yield event
            if event.get("type") in TERMINAL_EVENTS:
                return

    async def _owned(self, caller: Caller, task_id: str) -> A2ATaskRecord:
        try:
            return await self.tasks.get(caller.org_id, self.agent, caller.end_user, task_id)
        except NotFound:
            raise TaskNotFoundError(message=f"no task {task_id}") from None

    async def _task(
        self,
        caller: Caller,
        task: A2ATaskRecord,
        *,
        history_length: int | None = None,
        include_artifacts: bool = True,
    ) -> Task:
        return await self._snapshot(
            caller.org_id, task, history_length=history_length, include_artifacts=include_artifacts
        )

    async def snapshot(self, task: A2ATaskRecord) -> Task:
        """The task as it stands, as GetTask tells its owner (the push sweep's reading)."""
        return await self._snapshot(task.org_id, task)

    async def _snapshot(
        self,
        org_id: str,
        task: A2ATaskRecord,
        *,
        history_length: int | None = None,
        include_artifacts: bool = True,
    ) -> Task:
        if task.response_id is None:
            return task_of(task, None, history_length=history_length)
        response, inputs, outputs = await self.responses.store.with_items(org_id, task.response_id)
        asking = None
        if self.asks and response.status == "completed":
            pending = await self.operations.awaiting_from(org_id, [response.id])
            if response.id in pending:
                asking = pending[response.id].confirmation_message or answer_text(outputs) or "Confirm?"
        return task_of(
            task,
            response,
            inputs=inputs,
            outputs=outputs,
            history_length=history_length,
            include_artifacts=include_artifacts,
            question=asking,
            base_url=self.base_url,
        )


def _history_length(params: SendMessageRequest) -> int | None:
    return params.configuration.history_length if params.configuration.HasField("history_length") else None


class _HistoryLength(Protocol):
    history_length: int

    def HasField(self, field_name: str) -> bool: ...


def _check_history_length(params: _HistoryLength) -> None:
    """A2A 3.2.4: a history length, when given, is not negative."""
    if params.HasField("history_length") and params.history_length < 0:
        raise InvalidParamsError(message="historyLength: not negative")


def _token_of(cursor: Cursor) -> str:
    raw = f"{cursor.when.isoformat()}|{cursor.task_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_of(token: str) -> Cursor:
    """The cursor a page token names; InvalidParams for one this server did not give."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        when, task_id = raw.split("|", 1)
        moment = datetime.fromisoformat(when)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidParamsError(message="pageToken: not a token this server gave") from None
    if moment.tzinfo is None or not task_id:
        raise InvalidParamsError(message="pageToken: not a token this server gave")
    return Cursor(moment, task_id)


def _last_answered(previous: A2ATaskRecord | None) -> str | None:
    """The response a new task of the context continues: the context's last one that ran."""
    return previous.response_id if previous is not None else None


def _a2a_error(exc: HatchwayError) -> A2AError:
    if isinstance(exc, NotFound):
        return InvalidParamsError(message=exc.message)
    if isinstance(exc, InvalidRequest) or exc.status_code < 500:
        return InvalidParamsError(message=exc.message)
    return InternalError(message=exc.message)


__all__ = ["AgentTasks"]
