"""A WebSocket turn abandoned while its tool runs ends: the response reaches a terminal status (never
``in_progress`` for as long as the replica lives, its lease renewed) and the run has its record."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
from websockets.sync.client import connect

from tests.support.agent_loop import rounds, rule_for, summarise
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until


def test_a_turn_abandoned_after_its_tool_started_fails_and_is_recorded(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.handler = rounds(Reply(tool_calls=[("s__slow", {"ms": 60_000})]), summarise)
    url = gateway.url.replace("http", "ws") + "/v1/responses"
    auth = {"authorization": f"Bearer {gateway.key}"}

    with connect(url, additional_headers={"Authorization": f"Bearer {gateway.key}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "go"}))
        response_id = None
        while True:
            event = json.loads(ws.recv(timeout=10))
            response_id = response_id or event.get("response", {}).get("id")
            if event["type"] == "response.mcp_call.in_progress":
                break
        wait_until(lambda: server.tool_calls("slow") == 1, message="the tool to be running")
        ws.socket.shutdown(socket.SHUT_RDWR)  # gone mid-turn, without a close frame

    def ended() -> dict | None:
        body = httpx.get(f"{gateway.url}/v1/responses/{response_id}", headers=auth).json()
        return body if body["status"] not in ("queued", "in_progress") else None

    final = wait_until(ended, timeout=30, message="the abandoned response to end")
    assert final["status"] == "failed" and final["error"]["hatchway_code"] == "interrupted"
    records = httpx.get(f"{gateway.url}/v1/logs", headers=auth).json()["data"]
    assert [(r["response_id"], r["http_status"]) for r in records] == [(response_id, 499)]
