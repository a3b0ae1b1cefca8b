"""The push-notification half of ``AgentTasks`` (``handler.py``): the SDK's four config methods,
and the watcher that announces a task's state once its run ends (``push_configs.py`` stores the
configs, ``push.py`` sends the notifications)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from a2a.server.context import ServerCallContext
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError

from hatchway.a2a.caller import Caller, caller_of
from hatchway.a2a.push import PushNotifier
from hatchway.a2a.push_configs import A2APushConfigRecord, ConfigRefused, check_config, mark_of
from hatchway.a2a.store import A2ATaskRecord, A2ATasks
from hatchway.a2a.tasks import ENDED, WAITING

if TYPE_CHECKING:
    from hatchway.responses.events import EventLog
    from hatchway.responses.service import Responses
    from hatchway.responses.store import ResponseRecord

logger = logging.getLogger("hatchway.a2a.handler")


class TaskPushes:
    """Mixed into ``AgentTasks``: what it gives this half."""

    push: PushNotifier | None
    responses: Responses
    tasks: A2ATasks

    if TYPE_CHECKING:  # AgentTasks' own, which this half calls

        async def _owned(self, caller: Caller, task_id: str) -> A2ATaskRecord: ...

        async def _snapshot(self, org_id: str, task: A2ATaskRecord) -> Task: ...

        def _events(
            self, response: ResponseRecord, events: EventLog | None = None
        ) -> AsyncGenerator[dict[str, Any]]: ...

    # -- push notifications (push_configs.py, push.py) ----------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """A config for one of the caller's tasks; its URL passes the egress rule of inline plugins.
        The task's state, if it already is one that is announced, is sent at once."""
        caller = caller_of(context)
        notifier = self._notifier()
        task = await self._owned(caller, params.task_id)
        await self._check_push(params)
        row = await self._put_push(caller, task, params)
        self._watch(task)
        return await notifier.configs.as_config(row)

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        caller = caller_of(context)
        notifier = self._notifier()
        task = await self._owned(caller, params.task_id)
        row = await notifier.configs.get(task.id, params.id)
        if row is None:
            raise TaskNotFoundError(message=f"task {task.id} has no push config {params.id!r}")
        return await notifier.configs.as_config(row)

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """Every config of the task (at most ``MAX_CONFIGS_PER_TASK``: one page)."""
        caller = caller_of(context)
        notifier = self._notifier()
        task = await self._owned(caller, params.task_id)
        rows = await notifier.configs.of_task(task.id)
        return ListTaskPushNotificationConfigsResponse(
            configs=[await notifier.configs.as_config(row) for row in rows]
        )

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        caller = caller_of(context)
        notifier = self._notifier()
        task = await self._owned(caller, params.task_id)
        if not await notifier.configs.delete(task.id, params.id):
            raise TaskNotFoundError(message=f"task {task.id} has no push config {params.id!r}")

    # -- push notifications' plumbing ------------------------------------------------------------

    def _notifier(self) -> PushNotifier:
        if self.push is None:
            raise UnsupportedOperationError(message="push notifications are not configured here")
        return self.push

    async def _check_push(self, config: TaskPushNotificationConfig) -> None:
        try:
            await check_config(config, allow_private=self._notifier().allow_private)
        except ConfigRefused as exc:
            raise InvalidParamsError(message=f"push notification config: {exc}") from None

    async def _put_push(
        self, caller: Caller, task: A2ATaskRecord, config: TaskPushNotificationConfig
    ) -> A2APushConfigRecord:
        try:
            return await self._notifier().configs.put(caller.org_id, task.id, config)
        except ConfigRefused as exc:
            raise InvalidParamsError(message=f"push notification config: {exc}") from None

    async def _started(
        self,
        caller: Caller,
        task: A2ATaskRecord,
        push: TaskPushNotificationConfig | None,
        *,
        new: bool = False,
    ) -> None:
        """A task just started or went on: its config from the message stored, and a watcher
        started if it has any config (a ``new`` task has none but the message's: not looked up)."""
        if self.push is None:
            return
        if push is not None:
            await self._put_push(caller, task, push)
        elif new or not await self.push.configs.of_task(task.id):
            return
        self._watch(task)

    def _watch(self, task: A2ATaskRecord) -> None:
        """Follow the task's response to its end, in the background, then announce its state."""
        if self.push is None:
            return
        # One watcher per task and run in this process, however many configs a caller creates or
        # replaces (each would otherwise hold a follower of the same run); it announces to every config
        # the task has when the run ends. In the gateway's task registry: cancelled when it stops.
        key = f"a2a-push:{task.id}:{task.response_id or '-'}:{task.refusal is not None}"
        if key in self.responses.tasks.running():
            return
        try:
            self.responses.tasks.spawn(key, self._announce_when_ended(task.id, task))
        except RuntimeError:  # shutting down: the end is not announced, as after a restart
            logger.info("a2a push: not watching task %s, the gateway is stopping", task.id)

    async def _announce_when_ended(self, task_id: str, task: A2ATaskRecord) -> None:
        assert self.push is not None
        try:
            if task.response_id is not None and task.refusal is None:
                response = await self.responses.get(task.org_id, task.response_id)
                async for _ in self._events(response):
                    pass
            current = await self.tasks.get(task.org_id, task.agent, task.end_user, task_id)
            snapshot = await self._snapshot(current.org_id, current)
            state = snapshot.status.state
            if state in ENDED or state in WAITING:
                await self.push.announce(snapshot, mark_of(current.response_id, TaskState.Name(state)))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("a2a push: announcing task %s failed", task_id)
