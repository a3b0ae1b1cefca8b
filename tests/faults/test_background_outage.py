"""A database outage strands no background response: a job a worker takes while PostgreSQL cannot be
reached goes back on the queue with backoff, without spending one of ``background.max_attempts``,
so every response queued before a cut is running or ended within ``background.requeue_after_seconds``
plus one lease heartbeat of the database's return — and none runs twice.

Real processes (``hatchway serve`` and ``hatchway worker``) on PostgreSQL through an ``OutageProxy``
and the real Redis (a prefix of this test's, purged after).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL, fresh_pg_database
from tests.support.gateway import create_org_key
from tests.support.outage_proxy import OutageProxy
from tests.support.replicas import Replicas, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

pytestmark = NEEDS_PG_AND_REDIS

CUT_SECONDS = 6.0
REQUEUE_AFTER_SECONDS = 2
LEASE_SECONDS = 3  # replica_config's; the lease heartbeat is a third of it
SLACK_SECONDS = 12.0  # two busy cores: process scheduling, reconnecting pools, six runs one at a time


@pytest.fixture
def upstream() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


def wait_for_statuses(
    client: openai.OpenAI, ids: list[str], wanted: set[str], timeout: float, replicas: Replicas
) -> None:
    """Wait until every response's status is one of ``wanted``; a failure names the statuses last seen."""
    seen: dict[str, str] = {}

    def reached() -> bool:
        for process in replicas.processes:
            process.check_alive()
        try:
            seen.update({response_id: client.responses.retrieve(response_id).status for response_id in ids})
        except openai.APIStatusError:  # the gateway's own database connections coming back
            return False
        return all(status in wanted for status in seen.values())

    try:
        wait_until(reached, timeout=timeout, interval=0.1, message=f"every response to be {sorted(wanted)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen: {seen}\n{replicas.logs()}") from None


def test_responses_queued_just_before_a_database_cut_run_within_the_bound_once_it_is_back(
    tmp_path: Path, proxy: OutageProxy, upstream: ScriptedLLM
) -> None:
    held, release = threading.Event(), threading.Event()
    prompts = [f"queued before the cut #{i}" for i in range(6)]

    def answer(body: dict[str, Any]) -> Reply:
        text = str(body["messages"])
        if "hold the worker" in text:
            held.set()
            return Reply(text="held", gate=release)
        return Reply(text=f"ran: {next(p for p in prompts if p in text)}")

    upstream.handler = answer
    prefix = unique_redis_prefix()
    with fresh_pg_database("hatchway_bg_outage") as database_url:
        config = replica_config(tmp_path, proxy.url(database_url), REDIS_URL, prefix, upstream.base_url)
        config["background"]["requeue_after_seconds"] = REQUEUE_AFTER_SECONDS
        replicas = Replicas(tmp_path, config)
        try:
            serve = replicas.serve("a")  # serve_concurrency 0: only the worker runs jobs
            org = asyncio.run(create_org_key(database_url))
            client = serve.client(org.key)
            worker = replicas.worker("w1", "--concurrency", "1")

            # The worker is busy with a held run, so the responses queued now wait in Redis…
            client.responses.create(model="gpt-4o", input="hold the worker", background=True)
            assert held.wait(30), replicas.logs()
            ids = [
                client.responses.create(model="gpt-4o", input=prompt, background=True).id
                for prompt in prompts
            ]
            # …until the database is cut and the held run ends: the worker takes every job during the cut.
            restored = proxy.cut_for(CUT_SECONDS)
            release.set()
            assert restored.wait(CUT_SECONDS + 30)

            # Within the bound of the restore (with slack for a loaded machine), every one has started.
            bound = REQUEUE_AFTER_SECONDS + LEASE_SECONDS / 3
            running_or_ended = {"in_progress", "completed", "failed", "cancelled", "incomplete"}
            wait_for_statuses(client, ids, running_or_ended, bound + SLACK_SECONDS, replicas)
            wait_for_statuses(client, ids, {"completed"}, 30, replicas)
            texts = [client.responses.retrieve(response_id).output_text for response_id in ids]
            assert texts == [f"ran: {prompt}" for prompt in prompts]
            asked = [str(body["messages"]) for body in list(upstream.requests)]
            assert [sum(prompt in text for text in asked) for prompt in prompts] == [1] * 6  # none ran twice

            # The jobs were taken during the cut and put back, not spent: no job failed, none needed
            # the requeue pass.
            assert "the database is unreachable" in worker.log()
            assert not any("queued again" in process.log() for process in replicas.processes)
        finally:
            replicas.stop()
            purge_redis(REDIS_URL, prefix)
