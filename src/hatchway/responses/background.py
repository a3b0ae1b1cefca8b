"""Background mode: a response that goes on after its request has been answered.

Without Redis, a background response runs here, as a task of the replica that accepted it
(``ResponseRunner.start``), and is answered ``queued`` at once. With ``redis_url`` set, a background
response that is not streamed goes to the job queue instead (``enqueue``): it is checked, stored
with its request (``ResponseJobRecord``: the parameters, who asked, the request headers sealed with
the organisation's vault key), and the job names only the organisation and the response. Any
replica's or ``hatchway worker``'s queue consumer then plans and runs it (``run_queued``) — planned
once, where it runs. A streamed background response keeps running on the replica that accepted it,
whose client follows its live events.

The rule for a job taken more than once (its first worker died, or the queue swept it): a response
still ``queued`` is run; one that had already started is never run again, because its tool calls
may have had effects — its owner's lease lapses and any replica records it ``failed``
(``responses/store.py``). A cancelled or deleted response is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from hatchway.config.headers import NEVER_FORWARDED
from hatchway.config.settings import Settings
from hatchway.engine.context import RunContext
from hatchway.errors import HatchwayError, NotFound, Unavailable
from hatchway.limits.limiter import Admission, Limiter
from hatchway.limits.scopes import Requester
from hatchway.principal import Principal
from hatchway.responses.runs import ROUTE, ResponseRunner, admit_response, error_object
from hatchway.responses.store import (
    ResponseEnding,
    ResponseJob,
    ResponseJobRecord,
    ResponseRecord,
    stored_error,
)
from hatchway.responses.wire import CreateResponseRequest, response_object
from hatchway.store.orgs import OrgStore
from hatchway.tasks import CANCELLED_BY_REQUEST, TaskRegistry
from hatchway.vault import Vault

if TYPE_CHECKING:  # the job queue (saq, redis) loads only with redis_url set
    from hatchway.responses.queue import ResponseQueue
    from hatchway.responses.worker import ResponseWorker

logger = logging.getLogger(__name__)
ENQUEUE_FAILED = "The job queue (Redis) could not take this background response; create it again."


def headers_purpose(response_id: str) -> str:
    """What the sealed headers of a queued response are bound to (they open for it alone)."""
    return f"response_job:{response_id}"


def make_queue(settings: Settings) -> ResponseQueue | None:
    """The job queue of background responses when ``redis_url`` is set; None runs them in-process."""
    if not settings.redis_url:
        return None
    from hatchway.responses.queue import ResponseQueue

    return ResponseQueue(settings)


class Background:
    """Background responses of one gateway: queued for any worker, or run by this one."""

    def __init__(
        self,
        runner: ResponseRunner,
        *,
        tasks: TaskRegistry,
        queue: ResponseQueue | None,
        vault: Vault,
        orgs: OrgStore,
        settings: Settings,
        worker_id: str,
        limits: Limiter,
    ) -> None:
        self.runner = runner
        self.limits = limits
        self.tasks = tasks
        self.queue = queue
        self.vault = vault
        self.orgs = orgs
        self.settings = settings
        self.worker_id = worker_id

    def queues(self, body: CreateResponseRequest) -> bool:
        """Whether this request goes to the job queue (background, not streamed, Redis configured)."""
        return self.queue is not None and bool(body.background) and not body.stream

    # -- the accepting replica ---------------------------------------------------------------------

    async def enqueue(
        self,
        body: CreateResponseRequest,
        ctx: RunContext,
        body_bytes: int = 0,
        stored_with: Sequence[object] = (),
    ) -> tuple[dict[str, Any], Admission]:
        """Admit, check, store and queue a background response; the Response object as created
        (``queued``) and its admission.

        It is admitted to the limits under its own id, so the worker that runs it — on any replica —
        takes its hold over and gives it back when it ends (``_run``). The run is checked as planning
        would check it (a bad model, plugin or secret is a 4xx now) but planned by the worker that
        runs it, which also records it; if Redis refuses the job, the response fails (never left
        queued), its hold is given back here, and the caller gets 503.
        """
        assert self.queue is not None
        runner = self.runner
        async with runner.open_scope(body, ctx) as scope:
            admission = await admit_response(scope, body, body_bytes, lease=scope.response_id)
            accepted = await runner.accept(body, ctx)
            await runner.planner.check(body.model, ctx)
            job = await self._job(body, ctx)
            record = await runner.store_queued(body, ctx, accepted, job, stored_with)
            try:
                await self.queue.enqueue(record.org_id, record.id)
            except Exception as exc:
                logger.error("could not enqueue background response %s: %s", record.id, type(exc).__name__)
                error = stored_error("server_error", ENQUEUE_FAILED, "unavailable")
                await runner.store.finish(record.id, ResponseEnding(status="failed", output=[], error=error))
                raise Unavailable(ENQUEUE_FAILED) from None
            scope.hand_off()
        return response_object(record, []), admission

    async def _job(self, body: CreateResponseRequest, ctx: RunContext) -> ResponseJobRecord:
        assert ctx.response_id is not None
        # Credentials of the caller (the Hatchway key, cookies) and framing headers are never kept.
        headers = {k: v for k, v in ctx.request_headers.items() if k not in NEVER_FORWARDED}
        # The end user this request was admitted for travels sealed as the run's X-On-Behalf-Of (the
        # worker does not verify a user token again: it may have expired by then), never a header
        # the request carried besides it.
        headers.pop("x-on-behalf-of", None)
        if ctx.on_behalf_of is not None:
            headers["x-on-behalf-of"] = ctx.on_behalf_of
        sealed = await self.vault.seal_blob(
            ctx.org_id, orjson.dumps(headers), purpose=headers_purpose(ctx.response_id)
        )
        return ResponseJobRecord(
            response_id=ctx.response_id,
            body=body.model_dump(mode="json", by_alias=True, exclude={"input"}, exclude_none=True),
            key_id=ctx.principal.key_id,
            key_name=ctx.principal.key_name,
            sealed_headers=sealed,
        )

    async def abort(self, response_id: str) -> None:
        """Tell the queue a response was cancelled: off the queue, or its worker stops within a second.

        Best effort: the response row already says ``cancelled`` (the truth), and the worker also sees
        it at its next lease renewal.
        """
        if self.queue is None:
            return
        try:
            await self.queue.abort(response_id)
        except Exception as exc:
            logger.warning(
                "could not abort the job of %s (%s); its lease renewal will stop it",
                response_id,
                type(exc).__name__,
            )

    # -- the worker ----------------------------------------------------------------------------------

    async def run_queued(self, org_id: str, response_id: str) -> None:
        """Run one queued response to its end here; return at once if it is no longer queued."""
        store = self.runner.store
        try:
            record = await store.get(org_id, response_id)
        except NotFound:
            logger.info("background response %s was deleted; nothing to run", response_id)
            return
        if record.status != "queued":
            logger.info("background response %s is %s; not run again", response_id, record.status)
            return
        try:
            job = await store.job(response_id)
            ctx = await self._context(record, job)
        except HatchwayError as exc:
            logger.warning("background response %s cannot run: %s", response_id, exc.message)
            ending = ResponseEnding(status="failed", output=[], error=error_object(exc))
            await store.finish(response_id, ending)
            return
        body = CreateResponseRequest.model_validate({**job.body, "input": []})
        # A task of the gateway's, so a cancel seen at lease renewal, or shutdown, stops it.
        logger.info("running background response %s", response_id)
        task = self.tasks.spawn(record.id, self._run(body, ctx, record))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and not current.cancelling():
                return  # the run was stopped from inside (a cancel seen at lease renewal): the job is done
            # The queue aborted the job (cancelled elsewhere), or the worker is stopping: told apart by
            # the row, so a cancelled run also cancels what it waits on (an upstream MCP task) rather
            # than leaving it for a resume that will not come.
            try:
                asked = await self._cancelled(org_id, response_id)
            except asyncio.CancelledError:  # stopped again meanwhile: a stop, then
                asked = False
            task.cancel(CANCELLED_BY_REQUEST if asked else None)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise

    async def _cancelled(self, org_id: str, response_id: str) -> bool:
        try:
            record = await asyncio.shield(self.runner.store.get(org_id, response_id))
        except Exception:  # the database going away with the worker: not a cancel anyone asked for
            return False
        return record.status == "cancelled"

    async def give_back(self, record: ResponseRecord) -> None:
        """Free what a queued response held of the limits (its slots, under its id) when it ends
        before any worker took it (cancelled while queued)."""
        try:
            job = await self.runner.store.job(record.id)
            ctx = await self._context(record, job)
        except HatchwayError:
            return  # its slots free themselves when their lease expires
        body = CreateResponseRequest.model_validate({**job.body, "input": []})
        who = Requester.of(ctx.principal, ctx.on_behalf_of, body.model, background=True)
        await self.limits.settle(await self.limits.held(who, record.id), 0, 0.0)  # it used nothing

    async def _run(self, body: CreateResponseRequest, ctx: RunContext, record: ResponseRecord) -> None:
        scopes = self.runner.scopes
        scope = scopes.open(
            ROUTE, ctx, model=body.model, response_id=record.id, parent_id=record.parent_response_id
        )
        try:
            async with scope:
                # The accepting replica admitted it under its id (``enqueue``): its hold is this run's.
                who = Requester.of(ctx.principal, ctx.on_behalf_of, body.model, background=True)
                await scope.hold(who, record.id)
                run = await self.runner.restore(body, scope, record)
                await self.runner.run_background(run)
        except HatchwayError:
            return  # stored as failed and recorded

    async def _context(self, record: ResponseRecord, job: ResponseJob) -> RunContext:
        org = await self.orgs.get_org(record.org_id)
        headers: dict[str, str] = {}
        if job.sealed_headers is not None:
            raw = await self.vault.open_blob(
                record.org_id, job.sealed_headers, purpose=headers_purpose(record.id)
            )
            headers = orjson.loads(raw)
        ctx = RunContext.from_headers(
            Principal(org.id, org.name, job.key_id, job.key_name),
            headers,
            deadline_seconds=self.settings.loop_deadline_seconds,
            depth=record.depth,
            known_secrets=self.runner.planner.models.secrets,
        )
        ctx.response_id = record.id
        return ctx

    def worker(self, concurrency: int) -> ResponseWorker:
        """An SAQ worker running this gateway's queued responses, ``concurrency`` at a time."""
        assert self.queue is not None
        from hatchway.responses.worker import ResponseWorker

        return ResponseWorker(
            self.queue,
            self.run_queued,
            concurrency=concurrency,
            settings=self.settings.background,
            worker_id=self.worker_id,
        )

    async def serve(self) -> None:
        """Inside ``hatchway serve``: run queued responses too (``background.serve_concurrency``)."""
        concurrency = self.settings.background.serve_concurrency
        if self.queue is None or concurrency == 0:
            return
        await self.worker(concurrency).run()
