"""Attacks: a key's revocation, role change or model restriction must reach a Responses WebSocket that
was opened with it. docs/access.md: "the replica that revoked it refuses it at once, every other replica
within 10 seconds; the same bound applies to a role or restriction change". The socket is admitted
once, when it opens (``api/responses_socket.py``), and keeps that principal for as long as it lives.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.sync.client import connect

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

TERMINAL = ("response.completed", "response.failed", "response.incomplete")


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method, f"{gateway.url}{path}", headers={"authorization": f"Bearer {key}"}, timeout=60, **kw
    )


def _turn(conn: Any, model: str = "gpt-4o") -> dict[str, Any]:
    """Send one response.create; the turn's last event (terminal or error)."""
    conn.send(json.dumps({"type": "response.create", "model": model, "input": "hi", "store": False}))
    while True:
        event = json.loads(conn.recv(timeout=60))
        if event["type"] in TERMINAL or event["type"] == "error":
            return event


def _socket(gateway: RunningGateway, key: str) -> Any:
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    return connect(url, additional_headers={"authorization": f"Bearer {key}"}, open_timeout=30)


def _mint(gateway: RunningGateway, **body: Any) -> dict[str, Any]:
    assert gateway.org is not None
    made = _http(gateway, gateway.key, "POST", f"/v1/admin/orgs/{gateway.org.org_name}/keys", json=body)
    assert made.status_code == 201, made.text
    return made.json()


def test_a_revoked_key_cannot_keep_running_turns_on_an_open_websocket(
    gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    llm.handler = lambda body: Reply(text="ok")
    key = _mint(gateway, name="socket-app")
    assert gateway.org is not None
    with _socket(gateway, key["key"]) as conn:
        assert _turn(conn)["type"] == "response.completed"
        revoked = _http(
            gateway, gateway.key, "DELETE", f"/v1/admin/orgs/{gateway.org.org_name}/keys/{key['id']}"
        )
        assert revoked.status_code == 200, revoked.text
        # over HTTP the key is refused at once on this replica ...
        assert (
            _http(
                gateway, key["key"], "POST", "/v1/responses", json={"model": "gpt-4o", "input": "x"}
            ).status_code
            == 401
        )
        before = len(llm.requests)
        # ... but not on the socket it opened
        after = _turn(conn)
    assert after["type"] == "error" and len(llm.requests) == before, (
        f"a revoked key ran a turn on its open WebSocket: {after['type']}, "
        f"upstream calls {before} -> {len(llm.requests)}"
    )


def test_a_model_restriction_added_to_a_key_holds_on_its_open_websocket(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    llm.handler = lambda body: Reply(text="ok")
    gateway: RunningGateway = gateway_factory(
        models=[
            {"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"},
            {"name": "gpt-4o-mini", "provider": "upstream", "upstream_model": "gpt-4o-mini"},
        ]
    )
    key = _mint(gateway, name="socket-app")
    assert gateway.org is not None
    with _socket(gateway, key["key"]) as conn:
        assert _turn(conn)["type"] == "response.completed"
        narrowed = _http(
            gateway,
            gateway.key,
            "PATCH",
            f"/v1/admin/orgs/{gateway.org.org_name}/keys/{key['id']}",
            json={"allowed_models": ["gpt-4o-mini"]},
        )
        assert narrowed.status_code == 200, narrowed.text
        after = _turn(conn, "gpt-4o")
    assert after["type"] == "error", (
        f"a key narrowed to gpt-4o-mini still ran gpt-4o on its socket: {after['type']}"
    )
