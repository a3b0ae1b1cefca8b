"""A Redis restart that loses its data (no persistence) strands no background response: the
reconciliation of every process with the queue enqueues a ``queued`` response whose job is gone
again (within ``background.requeue_after_seconds`` plus one lease heartbeat), and workers report
in again, so ``/readyz`` counts them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.backends import PG_URL, fresh_pg_database
from tests.support.gateway import create_org_key
from tests.support.redis_server import RedisServer
from tests.support.replicas import Replicas, eventually, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not PG_URL, reason="needs PostgreSQL: set HATCHWAY_TEST_DATABASE_URL"),
]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def upstream() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


def test_a_response_queued_before_redis_lost_its_data_is_queued_again_and_completes(
    tmp_path: Path, redis_server: RedisServer, upstream: ScriptedLLM
) -> None:
    upstream.handler = lambda body: Reply(text="survived the restart")
    with fresh_pg_database("hatchway_redis_loss") as database_url:
        config = replica_config(
            tmp_path, database_url, redis_server.url, unique_redis_prefix(), upstream.base_url
        )
        config["background"]["requeue_after_seconds"] = 1
        replicas = Replicas(tmp_path, config)
        try:
            serve = replicas.serve("a")  # serve_concurrency 0 and no worker yet: the job stays queued
            org = asyncio.run(create_org_key(database_url))
            client = serve.client(org.key)
            created = client.responses.create(model="gpt-4o", input="queue me", background=True)
            assert created.status == "queued"

            redis_server.restart()  # the job is gone; the response row still says queued
            assert client.responses.retrieve(created.id).status == "queued"

            replicas.worker("w1")

            def completed() -> bool:
                return client.responses.retrieve(created.id).status == "completed"

            eventually(completed, 30, f"{created.id} to complete after the Redis restart", replicas)
            answer = client.responses.retrieve(created.id)
            assert answer.output_text == "survived the restart"
            # Queued again by the replica or the worker, whichever checked first.
            assert any("queued again" in process.log() for process in replicas.processes)

            # A worker that was running through a restart reports in again: /readyz counts it.
            redis_server.restart()

            def counted() -> bool:
                return (serve.ready() or {}).get("queue_workers", 0) >= 1

            eventually(counted, 20, "/readyz to count the worker after a second restart", replicas)
            # ...and takes jobs again.
            later = client.responses.create(model="gpt-4o", input="after the restart", background=True)

            def later_completed() -> bool:
                return client.responses.retrieve(later.id).status == "completed"

            eventually(
                later_completed, 30, f"{later.id} to complete on the worker that lived through it", replicas
            )
        finally:
            replicas.stop()
