"""Held: organisations are isolated by id — another organisation's ids lead nowhere.

The attack: organisation B, with its own valid key, takes ids copied from organisation A (a response
and the child a subagent created under it, an operation awaiting confirmation, a run log, a secret's
name) or guessed next to them (same time prefix, another random tail), and tries to read, list,
follow, continue, compact, cancel, delete or confirm them. Every attempt is a 404 that says no more
than a 404 for an id that never existed (never a 403 or a 409, which would confirm the id exists),
B's lists are empty of A's records, and A's records are untouched afterwards. Known single cases:
``tests/api/test_operations.py`` ``test_operations_are_scoped_to_the_organisation``,
``tests/api/test_secrets.py`` ``test_organisation_b_cannot_see_or_delete_organisation_a_secret``,
``tests/api/test_logs_and_isolation.py``, ``tests/observability/test_dashboard_api.py`` (children).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from tests.support.contas import ASK, QUESTION, RunningContas, contas_model
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

ANA = {"X-On-Behalf-Of": "ana"}
ATTACKS = [
    ("GET", "/v1/responses/{response}", None),
    ("GET", "/v1/responses/{child}", None),
    ("GET", "/v1/responses/{response}?stream=true", None),
    ("GET", "/v1/responses/{response}/input_items", None),
    ("GET", "/v1/responses?parent_response_id={response}", None),
    ("POST", "/v1/responses/{response}/cancel", None),
    ("DELETE", "/v1/responses/{child}", None),
    ("POST", "/v1/responses", {"model": "gpt-4o", "input": "next", "previous_response_id": "{response}"}),
    ("POST", "/v1/responses/compact", {"model": "gpt-4o", "previous_response_id": "{response}"}),
    ("GET", "/v1/operations/{operation}", None),
    ("POST", "/v1/operations/{operation}/confirm", {"confirm": True}),
    ("POST", "/v1/operations/{operation}/cancel", None),
    ("GET", "/v1/logs/{log}", None),
    ("DELETE", "/v1/secrets/{secret}", None),
]


def model(body: dict[str, Any]) -> Reply:
    """``agent:lead`` spawns one child; the child answers; ``agent:contas`` is the example's model."""
    task = next(m["content"] for m in body["messages"] if m["role"] == "user")
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if task == "child":
        return Reply("child done")
    if "spawn_subagent" in offered:
        done = any(m["role"] == "tool" for m in body["messages"])
        return Reply("joined") if done else Reply(tool_calls=[("spawn_subagent", {"task": "child"})])
    return contas_model(body)


def call(gw: RunningGateway, key: str, method: str, path: str, body: Any = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **ANA}
    return httpx.request(method, f"{gw.url}{path}", json=body, headers=headers, timeout=30)


def fill(text: str, ids: dict[str, str]) -> str:
    """``text`` with each ``{name}`` replaced by ``ids[name]``."""
    for name, value in ids.items():
        text = text.replace("{" + name + "}", value)
    return text


def attempt(gw: RunningGateway, key: str, method: str, path: str, body: Any, ids: dict[str, str]) -> Any:
    filled = json.loads(fill(json.dumps(body), ids)) if body is not None else None
    return call(gw, key, method, fill(path, ids), filled)


def socket_turn(gw: RunningGateway, key: str, previous: str) -> dict[str, Any]:
    """The first event of a WebSocket turn continuing ``previous``."""
    url = gw.url.replace("http://", "ws://") + "/v1/responses"
    turn = {"type": "response.create", "model": "gpt-4o", "input": "x", "previous_response_id": previous}
    with connect(url, additional_headers={"authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps(turn))
        return json.loads(ws.recv())


def anonymous(text: str, ids: dict[str, str]) -> str:
    for value in ids.values():
        text = text.replace(value, "<id>")
    return text


def guessed(value: str) -> str:
    """An id next to ``value``: the same prefix and time, another last character."""
    return value[:-1] + ("0" if value[-1] != "0" else "1")


def test_another_organisations_ids_are_not_found_and_its_records_untouched(
    contas: RunningContas,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    llm.handler = model
    lead = {"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True}}
    gw = gateway_factory(agents=[contas.agent(tmp_path / "contas"), lead])
    a = gw.client(default_headers=ANA)
    parent = a.responses.create(model="agent:lead", input="top")
    [child] = call(gw, gw.key, "GET", f"/v1/responses?parent_response_id={parent.id}").json()["data"]
    asked = a.chat.completions.with_raw_response.create(
        model="agent:contas",
        messages=[{"role": "user", "content": ASK}],
        extra_headers={"hatchway-session": "s1"},
    )
    assert parent.output_text == "joined" and asked.parse().choices[0].message.content == QUESTION
    assert gw.put_secret("a_secret", "a-value", allowed_hosts=["mcp.example.com"]).status_code == 201
    ids = {
        "response": parent.id,
        "child": child["id"],
        "operation": asked.headers["x-hatchway-operation-id"],
        "log": asked.headers["x-hatchway-request-id"],
        "secret": "a_secret",
    }
    near = {name: guessed(value) for name, value in ids.items()}
    b = gw.new_org()

    for method, path, body in ATTACKS:
        copied = attempt(gw, b.key, method, path, body, ids)
        guess = attempt(gw, b.key, method, path, body, near)
        assert (copied.status_code, guess.status_code) == (404, 404), (method, path, copied.text)
        assert anonymous(copied.text, ids) == anonymous(guess.text, near), (method, path)

    for path in ("/v1/responses", "/v1/operations", "/v1/operations?session=s1&agent=contas", "/v1/secrets"):
        assert call(gw, b.key, "GET", path).json()["data"] == [], path
    assert all(r["org_id"] == b.org_id for r in call(gw, b.key, "GET", "/v1/logs").json()["data"])
    for previous in (parent.id, near["response"]):  # continuing on a WebSocket: the same answer
        assert socket_turn(gw, b.key, previous)["error"]["code"] == "previous_response_not_found"
    assert gw.put_secret("a_secret", "b-value", key=b.key).status_code == 201  # B's own, not A's replaced

    # A's records are as they were.
    for path in ("/v1/logs/{log}", "/v1/responses/{child}"):
        assert call(gw, gw.key, "GET", fill(path, ids)).status_code == 200, path
    assert call(gw, gw.key, "GET", fill("/v1/responses/{response}", ids)).json()["status"] == "completed"
    pending = call(gw, gw.key, "GET", fill("/v1/operations/{operation}", ids)).json()
    assert pending["status"] == "AWAITING_CONFIRMATION"
    [secret] = call(gw, gw.key, "GET", "/v1/secrets").json()["data"]
    assert secret["name"] == "a_secret" and secret["allowed_hosts"] == ["mcp.example.com"]
    assert contas.backend.stats()["total_executions"] == 0
