"""``Responses``: the Responses lifecycle as the API layer uses it — create, follow, cancel, delete.

The API modules only translate HTTP, SSE and WebSocket frames to and from these calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.errors import Conflict, InvalidRequest
from hatchway.limits.limiter import Admission
from hatchway.responses.background import Background
from hatchway.responses.replay import follow
from hatchway.responses.runs import ResponseRunner, StartedRun, admit_response
from hatchway.responses.store import ACTIVE, ResponseRecord, ResponseStore
from hatchway.responses.wire import CreateResponseRequest, response_object
from hatchway.tasks import TaskRegistry


@dataclass(frozen=True, slots=True)
class Created:
    """A created response: the Response object to answer with, the running task if it runs here,
    and its admission to the limits (the rate-limit headers to answer with)."""

    response: dict[str, Any]
    started: StartedRun | None = None
    admission: Admission = field(default_factory=Admission)


class Responses:
    """The stored responses of one gateway and the runs that produce them."""

    def __init__(
        self,
        runner: ResponseRunner,
        background: Background,
        *,
        tasks: TaskRegistry,
        follow_seconds: float,
    ) -> None:
        self.runner = runner
        self.background = background
        self.tasks = tasks
        self.follow_seconds = follow_seconds
        """How long a stream of a response running elsewhere waits for it to end."""

    @property
    def store(self) -> ResponseStore:
        return self.runner.store

    async def create(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        *,
        body_bytes: int = 0,
        stored_with: Sequence[object] = (),
    ) -> Created:
        """Run a response as its request asks: to its end, streamed, in the background or queued.

        Each is admitted to the limits in its own scope, which gives the hold back when it ends (a
        queued one's, when the worker that runs it ends it); ``body_bytes`` sizes its reservation.
        ``stored_with``: rows stored with the response's record, in its transaction (none when it is
        refused before it is stored)."""
        if self.background.queues(body):
            response, admission = await self.background.enqueue(body, ctx, body_bytes, stored_with)
            return Created(response, admission=admission)
        if body.background or body.stream:
            started = await self.runner.start(
                body, ctx, self.tasks, body_bytes=body_bytes, stored_with=stored_with
            )
            return Created(started.snapshot, started, started.run.scope.admission)
        async with self.runner.open_scope(body, ctx) as scope:
            assert scope.response_id is not None
            with self.tasks.current(scope.response_id):  # its lease renewed while it runs, however long
                admission = await admit_response(scope, body, body_bytes)
                run = await self.runner.prepare(body, scope, stored_with=stored_with)
                await self.runner.execute(run)
        return Created(run.snapshot(), admission=admission)

    async def start_turn(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        local_history: list[dict[str, Any]] | None,
        *,
        body_bytes: int = 0,
    ) -> StartedRun:
        """A WebSocket turn: streamed, where an ``error`` event would end the turn (``response.failed``
        carries a failure instead)."""
        return await self.runner.start(
            body, ctx, self.tasks, local_history=local_history, error_events=False, body_bytes=body_bytes
        )

    async def get(self, org_id: str, response_id: str) -> ResponseRecord:
        return await self.store.get(org_id, response_id)

    async def response(self, record: ResponseRecord) -> dict[str, Any]:
        """The Response object of a stored record, with its output."""
        return response_object(record, await self.store.items(record.id, "output"))

    def follow(self, record: ResponseRecord, starting_after: int | None) -> AsyncIterator[dict[str, Any]]:
        """The events of a response, live or replayed (``GET /v1/responses/{id}?stream=true``)."""
        return follow(self.store, self.tasks, record, starting_after, wait_seconds=self.follow_seconds)

    async def cancel(self, org_id: str, response_id: str) -> dict[str, Any]:
        """Cancel a background response wherever it runs; 409 once it has ended otherwise."""
        record = await self.store.get(org_id, response_id)
        if not record.background:
            raise InvalidRequest(
                "Only responses created with background: true can be cancelled.", param="response_id"
            )
        if record.status in ACTIVE and await self.store.cancel(record.id):
            await self._stop(record.id)
            if record.status == "queued" and self.background.queue is not None:
                await self.background.give_back(record)  # no worker took it: its limits are freed here
        record = await self.store.get(org_id, response_id)
        if record.status != "cancelled":
            raise Conflict(
                f"The response already ended with status '{record.status}'; it cannot be cancelled.",
                param="response_id",
            )
        return await self.response(record)

    async def delete(self, org_id: str, response_id: str) -> None:
        """Delete a response (a running one is cancelled first)."""
        record = await self.store.get(org_id, response_id)
        if record.status in ACTIVE:
            cancelled = await self.store.cancel(record.id)
            await self._stop(record.id)
            if cancelled and record.status == "queued" and self.background.queue is not None:
                await self.background.give_back(record)
        await self.store.delete(org_id, response_id)

    async def _stop(self, response_id: str) -> None:
        # Here: its task is cancelled. Elsewhere: the queue aborts it, or its lease heartbeat sees the
        # cancel within a third of the lease.
        self.tasks.cancel(response_id)
        await self.background.abort(response_id)
