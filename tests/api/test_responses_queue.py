"""Background responses on the Redis job queue, with gateways in this process (PostgreSQL + Redis):
any replica runs them, a cancel anywhere stops them within seconds, the request's headers travel
sealed in the database (never in the job), and a queue that refuses the job fails the response.
The same with separate processes and ``hatchway worker``: tests/responses/test_worker_processes.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from tests.support.agent_loop import inline, rounds, summarise
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_servers import McpTestServer
from tests.support.replicas import purge_redis, unique_redis_prefix
from tests.support.responses_api import poll
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL"),
]


@pytest.fixture
def on_redis(pg_database_url: str) -> Iterator[dict[str, object]]:
    """Config overrides for gateways sharing PostgreSQL and this test's own Redis keys."""
    prefix = unique_redis_prefix()
    yield {"database_url": pg_database_url, "redis_url": REDIS_URL, "redis_prefix": prefix}
    purge_redis(REDIS_URL, prefix)


def job_of(gw: RunningGateway, response_id: str):  # type: ignore[no-untyped-def]
    assert gw.gateway.jobs is not None
    return gw.server.call(gw.gateway.jobs.job(response_id))


def logged(gw: RunningGateway, response_id: str, key: str) -> bool:
    records = gw.client(key).get("/logs", cast_to=object)["data"]  # type: ignore[index]
    return any(r["response_id"] == response_id for r in records)


def test_a_background_response_goes_through_the_queue_and_another_replica_runs_it(
    gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM, on_redis: dict[str, object]
) -> None:
    front = gateway_factory(**on_redis, background={"serve_concurrency": 0})  # takes requests only
    runner = gateway_factory(**on_redis)  # runs background responses off the queue (the default)
    llm.reply("ran on the other replica", delay=0.2)

    created = front.client().responses.create(model="gpt-4o", input="x", background=True)

    assert created.status == "queued"
    done = poll(front.client(), created.id, ("completed",), timeout=20)
    assert done.output_text == "ran on the other replica"
    job = job_of(runner, created.id)
    assert job is not None and job.status == "complete" and job.worker_id == runner.gateway.replica_id
    ready = httpx.get(f"{front.url}/readyz").json()
    assert ready["checks"] == {"database": "ok", "redis": "ok"} and ready["queue_workers"] == 1


def test_a_cancel_on_another_replica_stops_the_run_within_seconds(
    gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM, on_redis: dict[str, object]
) -> None:
    # Leases of a minute: their renewal (every 20 s) cannot be what stops the run in this test.
    runner = gateway_factory(**on_redis, response_lease_seconds=60)
    other = gateway_factory(**on_redis, response_lease_seconds=60, background={"serve_concurrency": 0})
    llm.reply("never", delay=60)
    created = other.client(runner.key).responses.create(model="gpt-4o", input="x", background=True)
    poll(runner.client(), created.id, ("in_progress",), timeout=20)
    wait_until(lambda: llm.requests, message="the upstream call to start")

    cancelled = other.client(runner.key).responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    # The queue told the runner's worker, which stopped the run and logged it as interrupted.
    wait_until(lambda: logged(runner, created.id, runner.key), timeout=10, interval=0.1, message="the stop")
    assert job_of(runner, created.id).status == "aborted"
    assert runner.client().responses.retrieve(created.id).status == "cancelled"


def test_a_queued_response_keeps_its_inline_plugin_and_forwarded_headers_sealed(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    on_redis: dict[str, object],
    pg_database_url: str,
) -> None:
    tenant = mcp_server_factory("tenant")
    user_token = f"user-token-{uuid.uuid4().hex}"
    secret_scanner.watch(user_token)
    secret_scanner.watch_database(pg_database_url)
    front = gateway_factory(**on_redis, allow_private_mcp_urls=True, background={"serve_concurrency": 0})
    gateway_factory(**on_redis, allow_private_mcp_urls=True)  # the replica that runs it
    plugin = inline({"mcp_servers": [{"id": "t", "url": tenant.url, "forward_headers": ["x-user-token"]}]})
    llm.handler = rounds(Reply(tool_calls=[("t__echo", {"text": "q"})]), summarise)
    client = front.client(default_headers={"hatchway-mcp-plugin": plugin, "x-user-token": user_token})

    created = client.responses.create(model="gpt-4o", input="x", background=True)

    done = poll(client, created.id, ("completed",), timeout=20)
    assert "echo:q" in done.output_text
    [sent] = tenant.tool_call_headers("echo")
    assert sent["x-user-token"] == user_token  # the run elsewhere had the request's headers…
    assert not sent.get("authorization", "").startswith("Bearer hw-")  # …but never the caller's key
    # …and the header value is nowhere in the database in clear (the scanner checks at teardown)


def test_when_redis_refuses_the_job_the_response_fails_with_503(
    gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM, pg_database_url: str
) -> None:
    dead_redis = "redis://127.0.0.1:9/0"  # discard port: nothing listens
    gw = gateway_factory(
        database_url=pg_database_url, redis_url=dead_redis, background={"serve_concurrency": 0}
    )

    with pytest.raises(openai.InternalServerError) as caught:
        gw.client().responses.create(model="gpt-4o", input="x", background=True)

    assert caught.value.status_code == 503
    assert "job queue" in caught.value.body["message"]  # type: ignore[index]

    def logged() -> list[dict[str, object]]:
        records = gw.client().get("/logs", cast_to=object)["data"]  # type: ignore[index]
        return [r for r in records if r["route"] == "responses"]

    [record] = wait_until(logged, timeout=10, interval=0.1, message="the failed request's log")
    assert record["http_status"] == 503
    listed = httpx.get(
        f"{gw.url}/v1/responses/{record['response_id']}", headers={"authorization": f"Bearer {gw.key}"}
    )
    assert listed.json()["status"] == "failed" and listed.json()["error"]["hatchway_code"] == "unavailable"
    assert llm.requests == []
    ready = httpx.get(f"{gw.url}/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["redis"] == "unreachable (ConnectionError)"
    assert httpx.get(f"{gw.url}/healthz").status_code == 200
