"""The job queue's sweep, on the real Redis: a job a worker has just taken (its id moved to the active
list, the job not yet marked active) is not aborted as stuck; one left so until the next sweep — its
worker died taking it — is swept and queued again (tobymao/saq#277, seen with two replicas)."""

from __future__ import annotations

import pytest
from saq.job import Status

from hatchway.responses.queue import ResponseQueue
from tests.responses.test_requeue import queue  # noqa: F401 - the fixture

pytestmark = pytest.mark.anyio


@pytest.mark.redis
async def test_a_job_just_taken_is_spared_by_the_sweep_and_one_left_taken_is_swept(
    queue: ResponseQueue,  # noqa: F811
) -> None:
    assert await queue.enqueue("org_1", "resp_a")
    saq = queue.queue
    # A worker's take, stopped between its two steps: the id is on the active list, the job queued.
    taken = await saq.redis.blmove(saq._queued, saq._active, 1, "LEFT", "RIGHT")
    assert taken is not None

    assert await saq.sweep(lock=1) == []
    job = await queue.job("resp_a")
    assert job is not None and job.status == Status.QUEUED and job.error is None
    assert await saq.redis.lrange(saq._active, 0, -1) == [taken]

    await saq.redis.delete(saq._sweep)  # the sweep's lock lapsed: the next sweep, seconds later
    assert await saq.sweep(lock=1, abort=0.1) == [taken.decode()]
    assert await saq.redis.lrange(saq._active, 0, -1) == []
    assert await saq.redis.lrange(saq._queued, 0, -1) == [taken]  # retried: a worker takes it again
