"""The small APIs the dashboard needs: ``GET /v1/mcp/servers`` and ``GET /v1/responses`` (the tree)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from hatchway.config.plugin import McpServerConfig
from hatchway.observability.mcp_status import public_location
from tests.support.agent_loop import rounds, summarise, write_plugin
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port


def get(gateway: RunningGateway, path: str, key: str | None = None, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{gateway.url}{path}",
        params=params,
        headers={"authorization": f"Bearer {key or gateway.key}"},
        timeout=30,
    )


def test_mcp_servers_report_reachability_tools_and_the_last_error(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    token = "mcp-token-9a8b7c6d5e"
    search = mcp_server_factory("search", required_bearer=token)
    research = write_plugin(
        tmp_path,
        "research",
        {
            "mcp_servers": [
                {
                    "id": "search",
                    "url": search.url,
                    "auth": {"type": "bearer", "secret_ref": "secret.tok"},
                    "max_retries": 0,
                },
                {"id": "down", "url": f"http://127.0.0.1:{free_port()}/mcp", "max_retries": 0},
            ]
        },
    )
    gateway = gateway_factory(
        routing_rules=[{"name": "research", "match": {"model": "gpt-4o"}, "plugin": research}],
        agents=[{"name": "helper", "model": "gpt-4o", "plugin": research}],
    )
    secret_scanner.watch(token)
    secret_scanner.watch_database(gateway.settings.database_url)
    headers = {"authorization": f"Bearer {gateway.key}"}
    assert (
        httpx.put(f"{gateway.url}/v1/secrets/tok", json={"value": token}, headers=headers).status_code == 201
    )
    search.fail_next(1, status=503)
    llm.handler = rounds(Reply(tool_calls=[("search__echo", {"text": "x"})]), summarise)
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}]
    )
    record = get(gateway, f"/v1/logs/{raw.headers['x-hatchway-request-id']}").json()
    listing = [s for s in record["steps"] if s["type"] == "list_tools"]
    assert [(s["server"], s["outcome"]) for s in listing] == [("down", "error")]
    assert "cannot reach the server" in listing[0]["error"]

    response = get(gateway, "/v1/mcp/servers")
    secret_scanner.observe("GET /v1/mcp/servers", response.text)

    assert response.status_code == 200
    servers = {(s["source"], s["id"]): s for s in response.json()["data"]}
    assert set(servers) == {
        ("rule:research", "search"),
        ("rule:research", "down"),
        ("agent:helper", "search"),
        ("agent:helper", "down"),
    }
    up = servers[("rule:research", "search")]
    assert up["reachable"] is True and up["error"] is None and up["auth_type"] == "bearer"
    assert {"echo", "slow", "fail", "add"} <= set(up["tools"])
    assert up["last_error"]["step"] == "tool_call" and up["last_error"]["tool"] == "echo"
    assert up["last_error"]["log_id"] == record["id"] and "503" in up["last_error"]["message"]
    down = servers[("rule:research", "down")]
    assert down["reachable"] is False and down["tools"] is None and "cannot reach" in down["error"]
    assert down["last_error"]["step"] == "list_tools"
    assert servers[("agent:helper", "down")]["last_error"] is None  # that run was the rule's

    other = gateway.new_org()
    theirs = {s["id"]: s for s in get(gateway, "/v1/mcp/servers", key=other.key).json()["data"]}
    assert theirs["search"]["reachable"] is False  # their vault has no 'tok'
    assert theirs["search"]["last_error"] is None and theirs["down"]["last_error"] is None
    assert get(gateway, "/v1/mcp/servers", key="hw-wrong").status_code == 401


def test_a_server_location_never_shows_credentials() -> None:
    server = McpServerConfig(id="s", url="https://user:pw@mcp.example.com:8443/x/mcp?api_key=k#frag")
    assert public_location(server) == "https://mcp.example.com:8443/x/mcp"
    local = McpServerConfig(id="l", command="/usr/bin/python3", args=["server.py", "--token", "t"])
    assert public_location(local) == "python3"


def test_responses_list_top_level_and_children_for_the_tree(gateway_factory, llm: ScriptedLLM) -> None:
    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply("joined")
        if task == "top":
            return Reply(tool_calls=[("spawn_subagent", {"task": "a"}), ("spawn_subagent", {"task": "b"})])
        return Reply(f"child {task}")

    llm.handler = script
    gateway = gateway_factory(agents=[{"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True}}])
    client = gateway.client()
    parent = client.responses.create(model="agent:lead", input="top")
    lone = client.responses.create(model="gpt-4o", input="hello")

    top = get(gateway, "/v1/responses").json()
    assert [r["id"] for r in top["data"]] == [lone.id, parent.id]
    assert top["data"][1]["children_count"] == 2 and top["data"][0]["children_count"] == 0
    assert top["data"][1]["output_text"] == "joined"
    page = get(gateway, "/v1/responses", limit=1).json()
    assert [r["id"] for r in page["data"]] == [lone.id] and page["has_more"]
    assert [r["id"] for r in get(gateway, "/v1/responses", after=lone.id).json()["data"]] == [parent.id]

    kids = get(gateway, "/v1/responses", parent_response_id=parent.id).json()["data"]
    assert len(kids) == 2 and {k["output_text"] for k in kids} == {"child a", "child b"}
    assert all(k["parent_response_id"] == parent.id and k["depth"] == 1 for k in kids)

    other = gateway.new_org()
    assert get(gateway, "/v1/responses", key=other.key, parent_response_id=parent.id).status_code == 404
    assert get(gateway, "/v1/responses", key=other.key).json()["data"] == []
    bad = get(gateway, "/v1/responses", after="log_1")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "after"
