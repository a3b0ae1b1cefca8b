"""Runs background-response jobs: an SAQ worker inside ``hatchway serve`` or ``hatchway worker``.

While a run lasts, its job is touched every quarter of ``background.heartbeat_seconds``; a job
whose worker died stops being touched, and the next sweep (any worker's) retries it or, after
``background.max_attempts`` takes, gives it up. What a retry does is the run's business
(``responses/background.py``): a response still ``queued`` is run; one that had started is never
run twice — its lease lapses and it ends ``failed``.

A take that finds the database unreachable is not the job's failure but an outage: it is not counted
against ``max_attempts``, and the job goes back on the queue after a backoff (jittered, doubling
from a second with each take, at most ``background.requeue_after_seconds`` and 60 s), so a blip
spends no attempt however many jobs meet it. The backoff is waited out inside the take, its heartbeat going
on, and the job then retried at once. (SAQ's own ``retry_delay`` would queue it again on the
scheduler's tick, which the sweep often shares, and the sweep takes a job that a worker is just
starting for a stuck one and aborts it.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from saq import Worker
from saq.job import Job
from saq.utils import exponential_backoff

from hatchway.config.background import BackgroundSettings
from hatchway.errors import Unavailable
from hatchway.responses.queue import RUN_RESPONSE, ResponseQueue
from hatchway.store.db import DATABASE_UNAVAILABLE, database_unreachable

logger = logging.getLogger(__name__)

_HEARTBEAT_STOP_SECONDS = 1.0
"""How long a finished take waits for its heartbeat to stop before it lets its job go."""

RunQueued = Callable[[str, str], Awaitable[None]]
"""``run(org_id, response_id)``: run one queued response to its end (or return if it is not queued)."""
_FIRST_BACKOFF_SECONDS = 1.0
_MAX_BACKOFF_SECONDS = 60.0
"""SAQ's job timeout is longer than this (``responses/queue.py``): a backoff never outlasts the take."""


class _HostedWorker(Worker):  # type: ignore[type-arg]
    SIGNALS = []  # noqa: RUF012 - the host process (uvicorn, the CLI) owns SIGINT/SIGTERM


class ResponseWorker:
    """Takes jobs off the queue, ``concurrency`` at a time, and runs them with ``run``."""

    def __init__(
        self,
        queue: ResponseQueue,
        run: RunQueued,
        *,
        concurrency: int,
        settings: BackgroundSettings,
        worker_id: str,
    ) -> None:
        self.queue = queue
        self._run = run
        self._beat = max(settings.heartbeat_seconds / 4, 0.25)
        self._max_backoff = min(float(settings.requeue_after_seconds), _MAX_BACKOFF_SECONDS)
        self.worker = _HostedWorker(
            queue.queue,
            [(RUN_RESPONSE, self._job)],
            id=worker_id,
            concurrency=concurrency,
            timers={"sweep": settings.sweep_seconds, "abort": 1, "schedule": 1, "worker_info": 5},
            dequeue_timeout=1.0,  # an idle slot re-checks for shutdown every second
            shutdown_grace_period_s=settings.shutdown_grace_seconds,
        )

    async def run(self) -> None:
        """Work until ``stop()`` or cancellation (which stops the same way)."""
        await self.queue.connect()
        working = asyncio.create_task(self.worker.start(), name="saq:worker")
        try:
            await asyncio.shield(working)
        except asyncio.CancelledError:
            await self.stop()
            await working
            raise

    async def stop(self) -> None:
        """Stop taking jobs; running ones get the shutdown grace period, then are cancelled."""
        # SAQ's stop waits for every task, its upkeep loops too, each up to its own interval (the
        # sweep's: seconds). They have nothing to finish: end them now (with the stop flag set, so
        # they take the cancellation as shutdown), and leave the grace period to running jobs.
        self.worker.event.set()
        for task in list(self.worker.tasks):
            if task.get_name() != "process":
                task.cancel()
        await self.worker.stop()

    async def _job(self, ctx: dict[str, Any], *, org_id: str, response_id: str) -> None:
        job: Job = ctx["job"]
        heartbeat = asyncio.create_task(self._heartbeat(job), name=f"heartbeat:{response_id}")
        try:
            await self._run(org_id, response_id)
        except Exception as exc:
            if not database_unreachable(exc):
                raise
            await self._put_back(job, response_id, exc)
            raise Unavailable(DATABASE_UNAVAILABLE.message, code=DATABASE_UNAVAILABLE.code) from None
        finally:
            heartbeat.cancel()
            # Not awaited unbounded: a touch caught mid-command in Redis's client can take the
            # cancellation late, and the job (the worker's only slot, at concurrency 1) waited on it
            # until shutdown — its retry never queued (seen after a database outage, 1 run in 6).
            await asyncio.wait({heartbeat}, timeout=_HEARTBEAT_STOP_SECONDS)

    async def _put_back(self, job: Job, response_id: str, exc: Exception) -> None:
        """An outage: give SAQ's count this take back, and wait out the backoff before its retry."""
        job.retries += 1  # set first: a shutdown during the wait retries the job uncounted too
        delay = exponential_backoff(job.attempts, _FIRST_BACKOFF_SECONDS, self._max_backoff)
        logger.warning(
            "background response %s: the database is unreachable (%s); its job goes back on the queue "
            "in %.1f s, this take not counted",
            response_id,
            type(exc).__name__,
            delay,
        )
        await asyncio.sleep(delay)

    async def _heartbeat(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self._beat)
            try:
                await job.update()
            except Exception:  # a Redis hiccup: the next beat tries again (the sweep allows for a few)
                logger.warning("could not touch job %s", job.key, exc_info=True)
