"""Remote A2A agents as subagents (issue 45, outbound): a Hatchway agent delegates with
``spawn_subagent`` (model ``a2a:<name>``) to an agent written with ``a2a-sdk`` running as another
process on loopback — children in parallel, a failure structured, the remote's question relayed, the
remote task id kept in the child's record, and hostile peers bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import RunningGateway
from tests.support.paths import ROOT
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port, wait_until

TOKEN = "remote-bearer-7c1e"


class RemoteAgent:
    def __init__(self, token: str | None = TOKEN) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.a2a_remote_agent",
                str(self.port),
                *([token] if token else []),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(self._up, timeout=60, interval=0.05, message="the remote A2A agent to serve")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.proc.communicate()[1]
        try:
            return httpx.get(f"{self.url}/.well-known/agent-card.json", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/stats", timeout=5).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.communicate(timeout=30)


@pytest.fixture
def remote() -> Iterator[RemoteAgent]:
    agent = RemoteAgent()
    yield agent
    agent.stop()


def delegating_model(tasks: list[dict[str, Any]]) -> Any:
    """The lead asks for ``tasks`` (spawn_subagent arguments) at once, then reports the results."""

    def handler(body: dict[str, Any]) -> Reply:
        results = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return Reply(tool_calls=[("spawn_subagent", t) for t in tasks])
        return Reply("results: " + json.dumps(results))

    return handler


@pytest.fixture
def lead(gateway_factory, remote: RemoteAgent, llm: ScriptedLLM) -> RunningGateway:  # type: ignore[no-untyped-def]
    gateway = gateway_factory(
        agents=[
            {
                "name": "lead",
                "model": "gpt-4o",
                "subagents": {"enabled": True, "max_concurrent": 4, "models": ["a2a:remote", "a2a:other"]},
            }
        ],
        a2a={
            "remote_agents": [
                {
                    "name": "remote",
                    "url": remote.url,
                    "auth": "secret.remote_token",
                    "timeout_seconds": 5,
                    "max_response_bytes": 1_000_000,
                    "poll_seconds": 0.1,
                },
                {"name": "other", "url": remote.url, "auth": "secret.unbound_token"},
            ]
        },
    )
    host = f"http://127.0.0.1:{remote.port}"
    assert gateway.put_secret("remote_token", TOKEN, allowed_hosts=[host]).status_code in (200, 201)
    assert gateway.put_secret(
        "unbound_token", TOKEN, allowed_hosts=["elsewhere.example.com"]
    ).status_code in (200, 201)
    return gateway


def results_of(text: str) -> list[dict[str, Any]]:
    assert text.startswith("results: "), text
    return json.loads(text[len("results: ") :])


def test_children_run_in_parallel_on_the_remote_agent_and_a_failure_is_structured(
    lead: RunningGateway, remote: RemoteAgent, llm: ScriptedLLM
) -> None:
    llm.handler = delegating_model(
        [
            {"task": "echo alpha", "model": "a2a:remote"},
            {"task": "echo beta", "model": "a2a:remote"},
            {"task": "fail", "model": "a2a:remote"},
        ]
    )
    client = lead.client()
    parent = client.responses.create(model="agent:lead", input="delegate")
    ok_alpha, ok_beta, failed = results_of(parent.output_text)
    assert ok_alpha["ok"] and ok_alpha["output_text"] == "echo: alpha"
    assert ok_beta["ok"] and ok_beta["output_text"] == "echo: beta"
    assert failed["ok"] is False and failed["error_code"] == "child_request_failed"
    assert "the remote tool broke" in failed["message"]
    assert remote.stats()["started"] == {"echo alpha": 1, "echo beta": 1, "fail": 1}  # each once
    # The child is a stored response of the tree that names the remote task.
    child = httpx.get(
        f"{lead.url}/v1/responses/{ok_alpha['response_id']}", headers={"authorization": f"Bearer {lead.key}"}
    ).json()
    assert child["model"] == "a2a:remote" and child["status"] == "completed"
    assert child["output"][0]["content"][0]["text"] == "echo: alpha"
    tree = httpx.get(
        f"{lead.url}/v1/responses/{parent.id}/tree", headers={"authorization": f"Bearer {lead.key}"}
    )
    if tree.status_code == 200:
        assert ok_alpha["response_id"] in json.dumps(tree.json())

    # Each remote child is a run of its own in the run log: its child response, its parent, how it
    # ended (the failure with the remote's reason).
    def remote_runs() -> list[dict[str, Any]] | None:
        records = httpx.get(
            f"{lead.url}/v1/logs",
            params={"model": "a2a:remote"},
            headers={"authorization": f"Bearer {lead.key}"},
        ).json()["data"]
        return records if len(records) == 3 else None

    runs = {r["response_id"]: r for r in wait_until(remote_runs, timeout=30, message="3 remote runs logged")}
    assert {ok_alpha["response_id"], ok_beta["response_id"]} < set(runs)
    assert all(r["parent_id"] == parent.id for r in runs.values())
    alpha = runs[ok_alpha["response_id"]]
    assert alpha["status"] == "ok" and alpha["http_status"] == 200, alpha
    [refused] = [r for r in runs.values() if r["status"] != "ok"]
    assert refused["status"] == "error" and refused["http_status"] == 502, refused
    assert "the remote tool broke" in refused["error"]


def test_the_remote_question_reaches_the_end_user_and_the_task_id_is_kept(
    lead: RunningGateway, remote: RemoteAgent, llm: ScriptedLLM
) -> None:
    llm.handler = delegating_model([{"task": "ask", "model": "a2a:remote"}])
    parent = lead.client().responses.create(model="agent:lead", input="delegate")
    [asked] = results_of(parent.output_text)
    assert asked["ok"] and "Which account, savings or checking?" in asked["output_text"]
    assert "input-required" in asked["output_text"]


def test_hostile_or_misconfigured_peers_are_bounded(
    lead: RunningGateway, remote: RemoteAgent, llm: ScriptedLLM
) -> None:
    llm.handler = delegating_model(
        [
            {"task": "forever", "model": "a2a:remote"},  # works forever: cut at timeout_seconds, cancelled
            {"task": "huge", "model": "a2a:remote"},  # 8 MB answer: refused past max_response_bytes
            {"task": "echo x", "model": "a2a:other"},  # a secret not bound to the peer's host: never sent
        ]
    )
    parent = lead.client(timeout=120).responses.create(model="agent:lead", input="delegate")
    forever, huge, unbound = results_of(parent.output_text)
    assert forever["ok"] is False and "did not finish" in forever["message"]
    assert huge["ok"] is False and (
        "larger than" in huge["message"] or "too large" in huge["message"].lower()
    )
    assert unbound["ok"] is False and "not bound" in unbound["message"]
    stats = remote.stats()
    assert stats["cancelled"] >= 1  # the endless task was cancelled, not left working
    assert "echo x" not in stats["started"]


def test_a_remote_name_not_configured_is_refused_when_the_config_loads(tmp_path: Path) -> None:
    from hatchway.config.settings import load_settings
    from hatchway.errors import ConfigError

    config = tmp_path / "hatchway.yaml"
    config.write_text(
        json.dumps(
            {
                "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
                "agents": [
                    {
                        "name": "lead",
                        "model": "up/m",
                        "subagents": {"enabled": True, "models": ["a2a:nobody"]},
                    }
                ],
            }
        )
    )
    with pytest.raises(ConfigError, match="a2a:nobody"):
        load_settings(config)


@pytest.mark.postgres
@pytest.mark.redis
def test_killing_the_worker_mid_task_keeps_the_remote_task_id_and_never_starts_it_again(
    tmp_path: Path, pg_database_url: str, llm: ScriptedLLM, remote: RemoteAgent
) -> None:
    import asyncio

    from hatchway.responses.store import ResponseRecord
    from hatchway.store.db import Database
    from tests.support.backends import REDIS_URL
    from tests.support.gateway import create_org_key
    from tests.support.replicas import Replicas, eventually, purge_redis, replica_config, unique_redis_prefix

    if not REDIS_URL:
        pytest.skip("needs HATCHWAY_TEST_REDIS_URL")
    prefix = unique_redis_prefix()
    lead_agent = {"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True, "models": ["a2a:remote"]}}
    remote_agent = {"name": "remote", "url": remote.url, "auth": "env:REMOTE_TOKEN", "timeout_seconds": 60}
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        agents=[lead_agent],
        a2a={"remote_agents": [remote_agent]},
    )
    replicas = Replicas(tmp_path, config, env={"REMOTE_TOKEN": TOKEN})
    llm.handler = delegating_model([{"task": "forever", "model": "a2a:remote"}])
    try:
        gateway = replicas.serve("a")
        worker = replicas.worker("w1")
        key = asyncio.run(create_org_key(pg_database_url)).key
        queued = gateway.client(key).responses.create(model="agent:lead", input="delegate", background=True)
        eventually(
            lambda: remote.stats()["started"].get("forever") == 1, 60, "the remote task to start", replicas
        )

        async def child() -> ResponseRecord | None:
            db = Database(pg_database_url)
            try:
                async with db.session() as s:
                    from sqlalchemy import select

                    return await s.scalar(
                        select(ResponseRecord).where(ResponseRecord.parent_response_id == queued.id)
                    )
            finally:
                await db.close()

        record = eventually(
            lambda: (c := asyncio.run(child())) and c.request.get("remote_task_id") and c,
            30,
            "the child to name the remote task",
            replicas,
        )
        remote_task_id = record.request["remote_task_id"]
        worker.kill()  # SIGKILL mid-task: nothing of the worker's clean-up runs
        replicas.worker("w2")
        parent = eventually(
            lambda: (
                (r := gateway.client(key).responses.retrieve(queued.id)).status
                not in ("queued", "in_progress")
                and r
            ),
            90,
            "the parent to end",
            replicas,
        )
        assert parent.status == "failed"  # cut by the crash, not run again
        ended = eventually(
            lambda: (c := asyncio.run(child())) and c.status != "in_progress" and c,
            60,
            "the child's lease to run out",
            replicas,
        )
        assert ended.request["remote_task_id"] == remote_task_id  # not lost: the record still names it
        assert remote.stats()["started"]["forever"] == 1  # not started twice
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)
