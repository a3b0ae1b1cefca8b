"""The queue of background responses: SAQ on Redis, one job per response, keyed by its id.

A job carries two ids (organisation and response), nothing else: the request is in the database.
The job's key is the response id, so enqueueing twice is harmless and any replica can abort it; a
key whose job has ended (failed, complete, aborted) takes a new job.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from saq.job import TERMINAL_STATUSES, Job, Status
from saq.queue.redis import RedisQueue

from hatchway.config.settings import Settings

logger = logging.getLogger(__name__)

RUN_RESPONSE = "run_response"
"""The one job function (see ``responses/worker.py``)."""
_FINISHED_JOB_TTL_SECONDS = 600
_OPEN = (Status.NEW, Status.QUEUED, Status.ACTIVE)


def queue_name(settings: Settings) -> str:
    return f"{settings.redis_prefix}responses"


# SAQ's own listing of the active jobs (``RedisQueue.sweep``'s script), registered by ours.
_ACTIVE_JOBS = """
local id_jobs = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SETEX', KEYS[1], ARGV[1], 1)
    for i, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
        id_jobs[i] = {v, redis.call('GET', v)}
    end
end
return id_jobs
"""


class JobQueue(RedisQueue):
    """SAQ's Redis queue, whose sweep spares a job it finds just taken.

    A worker takes a job by moving its id to the active list, then marks the job active; a sweep
    between the two (any replica's) finds it still ``queued`` there and aborts it as stuck
    (tobymao/saq#277): a background response two replicas shared failed ``interrupted`` 130 ms
    after it was queued. So a job found not yet active is left alone the first time: one still so
    at this process's next sweep (``background.sweep_seconds`` later at least) belongs to a worker
    that died taking it, and is swept as SAQ would.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._taking: set[bytes] = set()
        """The ids the last sweep found in the active list not yet active."""

    async def sweep(self, lock: int = 60, abort: float = 5.0) -> list[str]:
        if self._cleanup_script is None:
            listing = self.redis.register_script(_ACTIVE_JOBS)

            async def spared(**kwargs: Any) -> list[tuple[bytes, bytes | None]]:
                return self._spare(await listing(**kwargs))

            self._cleanup_script = spared  # type: ignore[assignment]
        return await super().sweep(lock, abort)

    def _spare(self, found: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
        kept, taking = [], set()
        for job_id, payload in found:
            job = self.deserialize(payload) if payload else None
            if job is not None and job.status in (Status.NEW, Status.QUEUED) and job_id not in self._taking:
                taking.add(job_id)
                continue
            kept.append((job_id, payload))
        self._taking = taking
        return kept


class ResponseQueue:
    """Enqueue, abort and inspect background-response jobs; ``queue`` is the SAQ queue workers use."""

    def __init__(self, settings: Settings) -> None:
        assert settings.redis_url, "the job queue needs redis_url"
        self.settings = settings.background
        self.queue = JobQueue.from_url(settings.redis_url, name=queue_name(settings))
        # A run is bounded by the loop deadline, moved by the time it waits for approvers
        # (``operations.approval_wait_seconds``) and for upstream MCP tasks
        # (``mcp_tasks.background_wait_seconds``); SAQ's own timeout is only a backstop past all.
        run = (
            settings.loop_deadline_seconds
            + settings.operations.approval_wait_seconds
            + settings.mcp_tasks.background_wait_seconds
        )
        self._timeout = math.ceil(run + 2 * settings.response_lease_seconds) + 60
        self._connected = False

    async def connect(self) -> None:
        if not self._connected:
            await self.queue.connect()
            self._connected = True

    async def enqueue(self, org_id: str, response_id: str) -> bool:
        """Queue the run of a stored ``queued`` response; False if its job is open (or being aborted)."""
        await self.connect()
        job = await self.queue.enqueue(
            RUN_RESPONSE,
            key=response_id,
            org_id=org_id,
            response_id=response_id,
            timeout=self._timeout,
            heartbeat=self.settings.heartbeat_seconds,
            retries=self.settings.max_attempts,
            ttl=_FINISHED_JOB_TTL_SECONDS,
        )
        return job is not None

    async def abort(self, response_id: str) -> bool:
        """Take a queued job off the queue, or tell the worker running it to stop; False if none is open."""
        job = await self.job(response_id)
        if job is None or job.status not in _OPEN:
            return False
        await job.abort("cancelled")
        return True

    async def job(self, response_id: str) -> Job | None:
        """The job of ``response_id`` as SAQ stores it (for health checks and tests)."""
        await self.connect()
        return await self.queue.job(response_id)

    async def stranding(self, response_id: str) -> str | None:
        """Why the job of a ``queued`` response will not run it — ``missing`` (Redis lost it), or how
        it ended (``failed``, ``complete``, ``aborted``) — or None while it waits or runs."""
        job = await self.job(response_id)
        if job is None:
            return "missing"
        return job.status.value if job.status in TERMINAL_STATUSES else None

    async def workers(self) -> int:
        """How many workers (replicas and ``hatchway worker`` processes) reported in lately."""
        await self.connect()
        return len((await self.queue.info())["workers"])

    async def ping(self) -> None:
        await self.queue.redis.ping()

    async def close(self) -> None:
        try:
            await self.queue.disconnect()
        except Exception as exc:  # Redis gone: SAQ's unsubscribe cannot reach it; drop the connections
            logger.info("job queue: closing without Redis (%s)", type(exc).__name__)
            await self.queue.redis.connection_pool.disconnect()
