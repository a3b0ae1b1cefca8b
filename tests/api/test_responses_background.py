"""Background responses: queued → polled to the end, cancel, resumable streams, and runs cut by a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.gateway import base_config, write_config
from tests.support.responses_api import poll, raw_events
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import answers_healthz, free_port, wait_until


def test_background_response_is_queued_then_completes(gateway, llm: ScriptedLLM) -> None:
    llm.reply("done in the background", delay=0.3)
    client = gateway.client()

    created = client.responses.create(model="gpt-4o", input="slow job", background=True)

    assert created.status == "queued" and created.background is True and created.output == []
    finished = poll(client, created.id, ("completed",))
    assert finished.output_text == "done in the background"
    assert finished.usage.total_tokens == 18


def test_cancel_stops_a_background_response(gateway, llm: ScriptedLLM) -> None:
    llm.reply("too late", delay=20)
    client = gateway.client()
    created = client.responses.create(model="gpt-4o", input="long job", background=True)
    poll(client, created.id, ("in_progress",))
    wait_until(lambda: llm.requests, message="the upstream call to start")

    cancelled = client.responses.cancel(created.id)

    assert cancelled.status == "cancelled" and cancelled.id == created.id
    assert client.responses.cancel(created.id).status == "cancelled"  # idempotent
    logs = wait_until(
        lambda: [r for r in client.get("/logs", cast_to=object)["data"] if r["response_id"] == created.id],
        message="the interrupted run's log record",
    )
    assert logs[0]["status"] == "error"  # the run itself stopped
    assert client.responses.retrieve(created.id).status == "cancelled"


def test_only_background_responses_can_be_cancelled(gateway, llm: ScriptedLLM) -> None:
    llm.reply("sync")
    client = gateway.client()
    created = client.responses.create(model="gpt-4o", input="x")

    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(created.id)


def test_background_stream_can_be_dropped_and_resumed(gateway, llm: ScriptedLLM) -> None:
    llm.reply("resumed text", delay=0.5, chunk_size=3)
    headers = {"authorization": f"Bearer {gateway.key}"}
    body = {"model": "gpt-4o", "input": "x", "background": True, "stream": True}

    seen = []
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["type"] == "response.queued":
                    break  # drop the connection while the run goes on
    response_id = seen[0]["response"]["id"]
    assert [e["type"] for e in seen] == ["response.created", "response.queued"]

    rest = raw_events(
        gateway, {}, method="GET", path=f"/v1/responses/{response_id}?stream=true&starting_after=1"
    )

    assert rest[0]["sequence_number"] == 2 and rest[0]["type"] == "response.in_progress"
    assert [e["sequence_number"] for e in rest] == list(range(2, 2 + len(rest)))
    assert rest[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in rest if e["type"] == "response.output_text.delta") == "resumed text"
    assert {e["response"]["id"] for e in rest if "response" in e} == {response_id}
    # after the end the stream is replayed from the stored response
    replayed = raw_events(gateway, {}, method="GET", path=f"/v1/responses/{response_id}?stream=true")
    assert replayed[-1]["type"] == "response.completed"
    assert replayed[-1]["response"]["output"] == rest[-1]["response"]["output"]


def test_run_interrupted_by_a_restart_is_reported_failed(
    gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    llm.reply("never arrives", delay=30)
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    first = gateway_factory(database_url=database_url)
    key = first.key
    created = first.client().responses.create(model="gpt-4o", input="x", background=True)
    poll(first.client(), created.id, ("in_progress",))

    first.stop()
    second = gateway_factory(database_url=database_url)

    failed = second.client(key).responses.retrieve(created.id)
    assert failed.status == "failed"
    assert "interrupted" in failed.error.message and "Create the response again" in failed.error.message


def test_run_of_a_crashed_process_is_failed_when_its_lease_expires(
    gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    llm.reply("never arrives", delay=30)
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    survivor = gateway_factory(database_url=database_url, response_lease_seconds=0.6)
    config = base_config(tmp_path, llm.base_url, database_url, response_lease_seconds=0.6)
    path = write_config(tmp_path, config, "crashing.yaml")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hatchway",
            "serve",
            "--config",
            str(path),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    crashing = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=survivor.key, max_retries=0)
    try:
        wait_until(
            lambda: answers_healthz(f"http://127.0.0.1:{port}"),
            timeout=120,
            message="the crashing gateway to start",
        )
        created = crashing.responses.create(model="gpt-4o", input="x", background=True)
        wait_until(lambda: llm.requests, message="the upstream call to start")
    finally:
        proc.send_signal(signal.SIGKILL)  # no shutdown hook runs: only the lease can tell
        proc.wait(10)
        crashing.close()

    failed = poll(survivor.client(), created.id, ("failed",), timeout=10)
    assert "stopped" in failed.error.message


def test_a_response_run_to_its_end_in_its_request_outlives_its_lease(
    gateway_factory, llm: ScriptedLLM
) -> None:
    """A plain (not streamed, not background) response runs inside its request; its lease is renewed
    like a spawned run's, so one that lasts longer than ``response_lease_seconds`` is not taken for a
    dead replica's and failed under it (it was: a slow answer, or a duplicate confirmation waiting
    for its operation's outcome on a busy machine, ended ``failed``/``interrupted``)."""
    gateway = gateway_factory(response_lease_seconds=0.6)
    llm.reply("slow but here", delay=2.5)  # four leases long

    response = gateway.client().responses.create(model="gpt-4o", input="x")

    assert response.status == "completed", response.error
    assert response.output_text == "slow but here"
    assert gateway.client().responses.retrieve(response.id).status == "completed"
