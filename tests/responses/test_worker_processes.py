"""Background responses on the Redis job queue, with real processes: two ``hatchway serve`` replicas
(A and B, which run no jobs themselves: ``background.serve_concurrency: 0``) on one PostgreSQL and
one Redis, and ``hatchway worker`` processes started per test.

The documented rule for dead workers (README, "Running several replicas"): a job is retried when its
worker stops touching it; a response that was still ``queued`` then runs on the next worker, and one
that had started is never run again — its lease lapses and it ends ``failed``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from saq.job import Job, Status
from saq.queue.redis import RedisQueue
from saq.utils import now

from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.gateway import OrgKey
from tests.support.replicas import (
    HatchwayProcess,
    Replicas,
    ServeProcess,
    eventually,
    purge_redis,
    replica_config,
    unique_redis_prefix,
)
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = NEEDS_PG_AND_REDIS


@dataclass
class Pair:
    replicas: Replicas
    a: ServeProcess
    b: ServeProcess
    prefix: str


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pair(
    pg_database_url: str, tmp_path_factory: pytest.TempPathFactory, upstream: ScriptedLLM
) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("workers")
    prefix = unique_redis_prefix()
    replicas = Replicas(tmp, replica_config(tmp, pg_database_url, REDIS_URL, prefix, upstream.base_url))
    try:
        yield Pair(replicas, replicas.serve("a"), replicas.serve("b"), prefix)
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)


@pytest.fixture
def work(pair: Pair) -> Iterator[Callable[[str], HatchwayProcess]]:
    """``work(name)`` starts a ``hatchway worker``; every one still running is stopped after the test."""
    started: list[HatchwayProcess] = []

    def start(name: str) -> HatchwayProcess:
        worker = pair.replicas.worker(name)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.terminate()


def answer_by_input(replies: dict[str, Reply], started: dict[str, threading.Event] | None = None) -> Any:
    """An upstream handler choosing the reply by the user's text (requests of other tests get "other")."""

    def handler(body: dict[str, Any]) -> Reply:
        text = str(body["messages"])
        for needle, reply in replies.items():
            if needle in text:
                if started and needle in started:
                    started[needle].set()
                return reply
        return Reply(text="other")

    return handler


def requests_with(upstream: ScriptedLLM, needle: str) -> int:
    return sum(1 for body in list(upstream.requests) if needle in str(body["messages"]))


def status_of(pair: Pair, client: openai.OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float):
    def reached() -> Any:
        current = client.responses.retrieve(response_id)
        return current if current.status in statuses else None

    return eventually(reached, timeout, f"{response_id} to reach {statuses}", pair.replicas)


def saq_job(pair: Pair, response_id: str) -> Job | None:
    """The response's job as the queue stores it in Redis."""

    async def read() -> Job | None:
        queue = RedisQueue.from_url(REDIS_URL, name=f"{pair.prefix}responses")
        try:
            return await queue.job(response_id)
        finally:
            await queue.disconnect()

    return asyncio.run(read())


def finished_job(pair: Pair, response_id: str, timeout: float = 30.0) -> Job:
    def done() -> Job | None:
        job = saq_job(pair, response_id)
        return (
            job
            if job is not None and job.status in (Status.COMPLETE, Status.ABORTED, Status.FAILED)
            else None
        )

    return eventually(done, timeout, f"the job of {response_id} to finish", pair.replicas)


def test_queued_on_a_runs_on_a_worker_and_is_polled_to_completion_on_b(
    pair: Pair, upstream: ScriptedLLM, pg_org: OrgKey, work: Callable[[str], HatchwayProcess]
) -> None:
    upstream.handler = answer_by_input({"queue me": Reply(text="worked off the queue", delay=0.2)})
    worker = work("w1")
    # The worker's readiness as a replica sees it: /readyz counts the workers reporting in.
    eventually(lambda: (pair.b.ready() or {}).get("queue_workers", 0) >= 1, 20, "B to count the worker")

    created = pair.a.client(pg_org.key).responses.create(
        model="gpt-4o", input="queue me", background=True, metadata={"k": "v"}
    )

    assert created.status == "queued"
    done = status_of(pair, pair.b.client(pg_org.key), created.id, ("completed",), timeout=60)
    assert done.output_text == "worked off the queue" and done.metadata == {"k": "v"}
    assert f"running background response {created.id}" in worker.log()  # A and B run no jobs
    job = saq_job(pair, created.id)
    assert job is not None and (job.status, job.attempts) == (Status.COMPLETE, 1)
    assert set(job.kwargs or {}) == {"org_id", "response_id"}  # ids only: the request is in the database
    assert worker.terminate() == 0  # SIGTERM: a clean stop


def test_a_worker_killed_mid_run_leaves_the_response_failed_and_it_is_not_run_again(
    pair: Pair, upstream: ScriptedLLM, pg_org: OrgKey, work: Callable[[str], HatchwayProcess]
) -> None:
    started = {"kill me": threading.Event()}
    upstream.handler = answer_by_input({"kill me": Reply(text="never", delay=120)}, started)
    first = work("w1")
    created = pair.a.client(pg_org.key).responses.create(model="gpt-4o", input="kill me", background=True)
    status_of(pair, pair.b.client(pg_org.key), created.id, ("in_progress",), timeout=30)
    assert started["kill me"].wait(30), pair.replicas.logs()

    first.kill()
    second = work("w2")  # the next worker: the queue hands it the dead worker's job

    failed = status_of(pair, pair.b.client(pg_org.key), created.id, ("failed",), timeout=60)
    assert failed.error is not None and failed.error.code == "server_error"
    assert "stopped" in failed.error.message  # the owner's lease lapsed: "…stopped (crash or restart)…"
    job = finished_job(pair, created.id, timeout=60)
    assert (job.status, job.attempts) == (Status.COMPLETE, 2)  # retried once, on the second worker…
    assert f"background response {created.id} is failed; not run again" in second.log()
    assert requests_with(upstream, "kill me") == 1  # …which did not run it a second time


def test_a_job_whose_worker_died_before_starting_the_run_is_retried_and_completes(
    pair: Pair, upstream: ScriptedLLM, pg_org: OrgKey, work: Callable[[str], HatchwayProcess]
) -> None:
    upstream.handler = answer_by_input({"retry me": Reply(text="ran on the retry")})
    created = pair.a.client(pg_org.key).responses.create(model="gpt-4o", input="retry me", background=True)

    # What a worker leaves in Redis when it dies right after taking a job: the job is active, its
    # attempt counted, and nobody touches it again.
    async def take_and_die() -> str:
        queue = RedisQueue.from_url(REDIS_URL, name=f"{pair.prefix}responses")
        await queue.connect()
        try:
            job = await queue.dequeue(timeout=10)
            # An earlier test's job may be listed once more: SAQ's sweep takes a job that is in
            # the active list but not yet marked active (a worker between dequeuing and starting
            # it) for a stuck one and retries it, so a job can be queued again after it ran. Run
            # again it would do nothing (its response is terminal); here it is ended and skipped.
            while job is not None and job.key != created.id:
                await queue.finish(job, Status.ABORTED)
                job = await queue.dequeue(timeout=10)
            assert job is not None
            job.started, job.worker_id = now(), "a-worker-that-died"
            job.attempts += 1
            await job.update(status=Status.ACTIVE)
            return job.key
        finally:
            await queue.disconnect()

    assert asyncio.run(take_and_die()) == created.id
    assert pair.b.client(pg_org.key).responses.retrieve(created.id).status == "queued"

    worker = work("w1")

    done = status_of(pair, pair.b.client(pg_org.key), created.id, ("completed",), timeout=60)
    assert done.output_text == "ran on the retry"
    job = finished_job(pair, created.id)
    assert (job.status, job.attempts) == (Status.COMPLETE, 2)
    assert f"running background response {created.id}" in worker.log()


def test_cancel_through_b_stops_the_run_on_the_worker(
    pair: Pair, upstream: ScriptedLLM, pg_org: OrgKey, work: Callable[[str], HatchwayProcess]
) -> None:
    started = {"cancel me": threading.Event()}
    upstream.handler = answer_by_input({"cancel me": Reply(text="never", delay=120)}, started)
    worker = work("w1")
    created = pair.a.client(pg_org.key).responses.create(model="gpt-4o", input="cancel me", background=True)
    status_of(pair, pair.b.client(pg_org.key), created.id, ("in_progress",), timeout=30)
    assert started["cancel me"].wait(30), pair.replicas.logs()

    cancelled = pair.b.client(pg_org.key).responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    # The worker stopped the run (and logged it as interrupted) and ended the job without a retry.
    logs = lambda: [  # noqa: E731
        r for r in pair.a.http("GET", "/v1/logs", pg_org.key).json()["data"] if r["response_id"] == created.id
    ]
    eventually(logs, 15, "the worker to record the stopped run", pair.replicas)
    job = finished_job(pair, created.id, timeout=15)
    assert job.attempts == 1
    assert pair.a.client(pg_org.key).responses.retrieve(created.id).status == "cancelled"
    assert worker.alive()
