"""Held: a confirmation executes its operation exactly once, however often and however fast it comes.

The attacks: the very same confirming request replayed — ``POST /v1/operations/{id}/confirm`` (with
its ``arguments_digest``), the chat "sim" of the conversation, the Responses "sim" chained on the
question — and 12 confirmations at once from threads, API confirms racing the conversation's
"sim" (Chat Completions and Responses). The contas backend counts one execution; every losing API
confirm is a 409 that carries the operation (done with its verdict: it waits while it executes); a
losing "sim" is answered by the gateway with that outcome (the model is not asked, so it cannot call
the tool again). Each runs on SQLite and, when configured, PostgreSQL (the race is a
compare-and-set in the database). Every request says ``X-On-Behalf-Of: ana``. Known: a second
confirm (``tests/api/test_operations.py``), 4 API confirms at once and 2 mixed
(``tests/api/test_operations.py``, ``tests/api/test_operations_safety.py``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.gateway import RunningGateway

ANA = {"X-On-Behalf-Of": "ana"}
DECIDED = (
    "Operation {} (cancelar_vas_avulso) was confirmed already and executed once: COMPLETED, PARTIAL_SUCCESS."
)
YES = [
    {"role": "user", "content": ASK},
    {"role": "assistant", "content": QUESTION},
    {"role": "user", "content": "sim"},
]


def post(gw: RunningGateway, path: str, body: Any = None, **headers: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {gw.key}", **ANA, **headers}
    return httpx.post(f"{gw.url}{path}", json=body, headers=headers, timeout=60)


def ask_in_chat(gw: RunningGateway) -> tuple[str, Callable[[], str]]:
    """The operation asked in a chat session, and the session's "sim" (its answer text)."""

    def turn(messages: list[dict[str, str]]) -> httpx.Response:
        body = {"model": "agent:contas", "messages": messages}
        return post(gw, "/v1/chat/completions", body, **{"hatchway-session": "s1"})

    asked = turn(YES[:1])
    assert asked.json()["choices"][0]["message"]["content"] == QUESTION

    def yes() -> str:
        return turn(YES).json()["choices"][0]["message"]["content"]

    return asked.headers["x-hatchway-operation-id"], yes


def ask_in_responses(gw: RunningGateway) -> tuple[str, Callable[[], str]]:
    """The operation asked in a Responses chain, and the chain's "sim" (its output text)."""
    first = post(gw, "/v1/responses", {"model": "agent:contas", "input": ASK}).json()
    [call] = [item for item in first["output"] if item["type"] == "mcp_call"]

    def yes() -> str:
        body = {"model": "agent:contas", "input": "sim", "previous_response_id": first["id"]}
        output = post(gw, "/v1/responses", body).json()["output"]
        return "".join(c["text"] for i in output if i["type"] == "message" for c in i["content"])

    return json.loads(call["output"])["operation_id"], yes


def confirm(gw: RunningGateway, op_id: str, digest: str | None = None) -> httpx.Response:
    body = {"confirm": True, "arguments_digest": digest} if digest else None
    return post(gw, f"/v1/operations/{op_id}/confirm", body)


def lost(response: httpx.Response, op_id: str) -> bool:
    """A 409 carrying the operation: executing, or done with its verdict."""
    error, op = response.json()["error"], response.json().get("operation") or {}
    finished = op.get("status") == "COMPLETED" and op["verdict"]["status"] == "PARTIAL_SUCCESS"
    return (
        response.status_code == 409
        and error["code"] in ("operation_not_pending", "operation_already_confirmed")
        and op.get("id") == op_id
        and (finished or op.get("status") == "EXECUTING")
    )


@pytest.mark.parametrize("channel", ["api", "chat", "responses"])
def test_a_replayed_confirmation_executes_once(
    channel: str, ops_gateway: RunningGateway, contas: RunningContas
) -> None:
    op_id, yes = ask_in_responses(ops_gateway) if channel == "responses" else ask_in_chat(ops_gateway)
    if channel == "api":
        headers = {"authorization": f"Bearer {ops_gateway.key}", **ANA}
        digest = httpx.get(f"{ops_gateway.url}/v1/operations/{op_id}", headers=headers).json()[
            "arguments_digest"
        ]
        first, *replays = [confirm(ops_gateway, op_id, digest) for _ in range(3)]
        assert first.status_code == 200 and first.json()["status"] == "COMPLETED"
        assert all(lost(r, op_id) and r.json()["operation"]["status"] == "COMPLETED" for r in replays)
    else:
        first, *replays = [yes() for _ in range(3)]
        assert first == ANSWER and all(r.startswith(DECIDED.format(op_id)) for r in replays), replays
        assert lost(confirm(ops_gateway, op_id), op_id)  # and the API, after them, gets the outcome
    assert contas.backend.executions == {op_id: 1}


@pytest.mark.parametrize("channel", ["chat", "responses"])
def test_twelve_confirmations_at_once_execute_once(
    channel: str, ops_gateway: RunningGateway, contas: RunningContas
) -> None:
    op_id, yes = ask_in_responses(ops_gateway) if channel == "responses" else ask_in_chat(ops_gateway)
    start = threading.Barrier(12)

    def by_api() -> httpx.Response:
        start.wait(10)
        return confirm(ops_gateway, op_id)

    def by_yes() -> str:
        start.wait(10)
        return yes()

    with ThreadPoolExecutor(12) as pool:
        apis = [pool.submit(by_api) for _ in range(6)]
        replies = [pool.submit(by_yes) for _ in range(6)]
        api_answers = [f.result(60) for f in apis]
        reply_answers = [f.result(60) for f in replies]

    assert contas.backend.executions == {op_id: 1}
    winners = [r for r in api_answers if r.status_code == 200]
    assert len(winners) <= 1 and all(lost(r, op_id) for r in api_answers if r.status_code != 200)
    assert all(a == ANSWER or a.startswith(DECIDED.format(op_id)) for a in reply_answers), reply_answers
    assert winners or ANSWER in reply_answers  # somebody executed it, and was told the outcome
