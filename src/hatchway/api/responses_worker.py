"""The worker side of queued background responses: rebuild the run from the database and run it.

The rule for a job taken more than once (its first worker died, or the queue swept it): a response
still ``queued`` is run; one that had already started is never run again, because its tool calls
may have had effects — its owner's lease lapses and any replica records it ``failed``
(``store/responses.py``). A cancelled or deleted response is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import orjson

from hatchway.api.responses_queue import headers_purpose
from hatchway.api.responses_runs import ResponseRunner, error_object
from hatchway.api.responses_wire import CreateResponseRequest
from hatchway.engine.context import Principal, RunContext
from hatchway.errors import HatchwayError, NotFound
from hatchway.gateway import Gateway
from hatchway.store.response_jobs import ResponseJob, ResponseJobStore
from hatchway.store.responses import Outcome, ResponseRecord

if TYPE_CHECKING:  # the job queue (saq, redis) loads only with redis_url set: see response_worker
    from hatchway.jobs import ResponseWorker

logger = logging.getLogger(__name__)


async def run_queued(gw: Gateway, org_id: str, response_id: str) -> None:
    """Run one queued response to its end here; return at once if it is no longer queued."""
    try:
        record = await gw.responses.get(org_id, response_id)
    except NotFound:
        logger.info("background response %s was deleted; nothing to run", response_id)
        return
    if record.status != "queued":
        logger.info("background response %s is %s; not run again", response_id, record.status)
        return
    runner = ResponseRunner(gw)
    try:
        job = await ResponseJobStore(gw.db).get(response_id)
        ctx = await _context(gw, record, job)
        body = CreateResponseRequest.model_validate({**job.body, "input": []})
        run = await runner.restore(body, ctx, record)
    except HatchwayError as exc:  # restore() has recorded its own failures; this records the rest
        logger.warning("background response %s cannot run: %s", response_id, exc.message)
        error = error_object(exc)  # before any secret of the run was resolved
        await gw.responses.finish(response_id, Outcome(status="failed", output=[], error=error))
        return
    # Registered with the gateway's tasks so a cancel seen at lease renewal, or shutdown, stops it.
    logger.info("running background response %s", response_id)
    task = gw.tasks.spawn(record.id, runner.run_background(run))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and not current.cancelling():
            return  # the run was stopped from inside (a cancel seen at lease renewal): the job is done
        task.cancel()  # the queue aborted the job (cancelled elsewhere), or the worker is stopping
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise


async def _context(gw: Gateway, record: ResponseRecord, job: ResponseJob) -> RunContext:
    org = await gw.orgs.get_org(record.org_id)
    headers: dict[str, str] = {}
    if job.sealed_headers is not None:
        raw = await gw.vault.open_blob(record.org_id, job.sealed_headers, purpose=headers_purpose(record.id))
        headers = orjson.loads(raw)
    return RunContext(
        principal=Principal(org.id, org.name, job.key_id, job.key_name),
        request_headers=headers,
        on_behalf_of=record.on_behalf_of,
        session_key=headers.get("hatchway-session") or None,
        deadline=time.monotonic() + gw.settings.loop_deadline_seconds,
        depth=record.depth,
    )


def response_worker(gw: Gateway, concurrency: int) -> ResponseWorker:
    """An SAQ worker running this gateway's queued responses, ``concurrency`` at a time."""
    assert gw.jobs is not None
    from hatchway.jobs import ResponseWorker

    return ResponseWorker(
        gw.jobs,
        lambda org_id, response_id: run_queued(gw, org_id, response_id),
        concurrency=concurrency,
        settings=gw.settings.background,
        worker_id=gw.replica_id,
    )


async def serve_queue(gw: Gateway) -> None:
    """Inside ``hatchway serve``: run queued responses too (``background.serve_concurrency``)."""
    concurrency = gw.settings.background.serve_concurrency
    if gw.jobs is None or concurrency == 0:
        return
    await response_worker(gw, concurrency).run()
