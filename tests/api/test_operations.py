"""``/v1/operations`` over HTTP: listing, evidence, confirm (once), cancel, validation, isolation.

Operations are put up for confirmation by the real flow: a chat request to the ``contas`` agent
(scripted model) whose validator runs on the example MCP server. Confirming executes through the
gateway's MCP pool (``Gateway.operation_callers``, the agent plugin's client).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.contas import ABC, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.operations import operation
from tests.support.servers import wait_until


def _pending(
    gw: RunningGateway, contas: RunningContas, *, key: str | None = None, session: str = "s1"
) -> str:
    """Ask for a cancellation in a chat turn: it stops at AWAITING_CONFIRMATION."""
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model="agent:contas",
        messages=[{"role": "user", "content": "cancele Produto A, Produto B e Produto C"}],
        extra_headers={"hatchway-session": session, "X-On-Behalf-Of": "ana"},
    )
    assert raw.parse().choices[0].message.content.startswith("Você confirma")
    return raw.headers["x-hatchway-operation-id"]


def _http(gw: RunningGateway, method: str, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
    """A request as ana, the end user the operations of ``_pending`` are requested for."""
    headers = {"authorization": f"Bearer {key or gw.key}", "X-On-Behalf-Of": "ana", **kw.pop("headers", {})}
    return httpx.request(method, f"{gw.url}{path}", headers=headers, timeout=30, **kw)


def test_list_and_get_show_the_evidence(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)
    listed = _http(ops_gateway, "GET", "/v1/operations", params={"status": "AWAITING_CONFIRMATION"})
    assert listed.status_code == 200
    assert [o["id"] for o in listed.json()["data"]] == [op_id]
    assert _http(ops_gateway, "GET", "/v1/operations", params={"status": "completed"}).json()["data"] == []

    op = _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()
    assert op["object"] == "operation" and op["status"] == "AWAITING_CONFIRMATION"
    assert op["confirmation_message"] == "Você confirma o cancelamento de Produto A, Produto B e Produto C?"
    assert op["arguments"] == ABC and len(op["resolved_arguments"]["items"]) == 3
    assert op["requested_by"] == "ana" and op["agent"] == "contas" and op["session_key"] == "s1"

    bad = _http(ops_gateway, "GET", "/v1/operations", params={"status": "DONE"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "status"


def test_confirm_executes_once_and_a_second_confirm_gets_409_with_the_outcome(
    ops_gateway: RunningGateway, contas: RunningContas
) -> None:
    op_id = _pending(ops_gateway, contas)
    confirmed = _http(
        ops_gateway,
        "POST",
        f"/v1/operations/{op_id}/confirm",
        json={"confirm": True},
    )
    assert confirmed.status_code == 200, confirmed.text
    body = confirmed.json()
    assert body["status"] == "COMPLETED" and body["verdict"]["status"] == "PARTIAL_SUCCESS"
    assert body["confirmed_by"] == "ana" and body["confirmed_via"] == "api"
    assert [(i["name"], i["success"]) for i in body["items"]] == [
        ("Produto A", True),
        ("Produto B", False),
        ("Produto C", True),
    ]

    again = _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "operation_not_pending"
    assert again.json()["operation"]["verdict"]["status"] == "PARTIAL_SUCCESS"
    # A "sim" in the conversation afterwards finds nothing pending.
    late = ops_gateway.client().chat.completions.create(
        model="agent:contas",
        messages=[{"role": "user", "content": "sim"}],
        extra_headers={"hatchway-session": "s1"},
    )
    assert late.choices[0].message.content == "Posso ajudar em algo mais?"
    assert contas.backend.executions == {op_id: 1}
    [primary] = [c for c in contas.backend.calls if c["tool"] == "cancelar_vas_avulso"]
    assert primary["idempotency_key"] == op_id


def test_confirm_while_executing_waits_for_the_outcome_and_runs_nothing_more(
    ops_gateway: RunningGateway, contas: RunningContas
) -> None:
    op_id = _pending(ops_gateway, contas)
    contas.backend.gate = threading.Event()  # hold the first execution in flight
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_http, ops_gateway, "POST", f"/v1/operations/{op_id}/confirm")
        assert contas.backend.started.wait(120)
        second = pool.submit(
            _http, ops_gateway, "POST", f"/v1/operations/{op_id}/confirm", json={"confirm": True}
        )
        assert operation(ops_gateway, op_id)["status"] == "EXECUTING"
        contas.backend.gate.set()
        assert first.result(120).status_code == 200
        duplicate = second.result(120)
    # The duplicate is answered with the outcome it waited for, not with "EXECUTING".
    assert duplicate.status_code == 409 and duplicate.json()["error"]["code"] == "operation_not_pending"
    assert duplicate.json()["operation"]["status"] == "COMPLETED"
    assert duplicate.json()["operation"]["verdict"]["status"] == "PARTIAL_SUCCESS"
    assert contas.backend.executions == {op_id: 1}


def test_simultaneous_confirms_execute_once(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)
    start = threading.Barrier(4)

    def confirm() -> int:
        start.wait(60)
        return _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm").status_code

    with ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(lambda _: confirm(), range(4)))
    assert codes == [200, 409, 409, 409]
    assert contas.backend.executions == {op_id: 1}


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b'{"confirm": "true"}', "confirm"),
        (b'{"confirm": false}', "confirm"),
        (b'{"confirm": 1}', "confirm"),
        (b'{"confirm": true, "force": true}', "force"),
        (b'{"confirm": true, "arguments_digest": 5}', "arguments_digest"),
        (b"[true]", None),
        (b"{not json", None),
    ],
)
def test_confirm_body_must_say_true_as_a_boolean(
    ops_gateway: RunningGateway, contas: RunningContas, content: bytes, param: str | None
) -> None:
    op_id = _pending(ops_gateway, contas)
    response = _http(
        ops_gateway,
        "POST",
        f"/v1/operations/{op_id}/confirm",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()["status"] == "AWAITING_CONFIRMATION"
    assert contas.backend.stats()["total_executions"] == 0


def test_confirm_with_a_stale_digest_is_refused(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)
    digest = _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()["arguments_digest"]
    stale = _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm", json={"arguments_digest": "0" * 64})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "arguments_digest_mismatch"
    assert contas.backend.stats()["total_executions"] == 0
    good = _http(
        ops_gateway,
        "POST",
        f"/v1/operations/{op_id}/confirm",
        json={"confirm": True, "arguments_digest": digest},
    )
    assert good.status_code == 200


def test_cancel_then_confirm_is_a_conflict(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)
    cancelled = _http(
        ops_gateway, "POST", f"/v1/operations/{op_id}/cancel", headers={"X-On-Behalf-Of": "ana"}
    )
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert "(by ana)" in cancelled.json()["status_reason"]
    assert _http(ops_gateway, "POST", f"/v1/operations/{op_id}/cancel").status_code == 200  # idempotent
    confirm = _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm")
    assert confirm.status_code == 409 and confirm.json()["operation"]["status"] == "CANCELLED"
    assert contas.backend.stats()["total_executions"] == 0


def test_a_finished_operation_cannot_be_cancelled(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)
    assert _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm").status_code == 200
    late = _http(ops_gateway, "POST", f"/v1/operations/{op_id}/cancel")
    assert late.status_code == 409 and late.json()["error"]["code"] == "operation_not_cancellable"
    assert late.json()["operation"]["status"] == "COMPLETED"


def test_operations_are_scoped_to_the_organisation(
    ops_gateway: RunningGateway, contas: RunningContas
) -> None:
    op_id = _pending(ops_gateway, contas)
    other = ops_gateway.new_org()
    for method, path in (
        ("GET", f"/v1/operations/{op_id}"),
        ("POST", f"/v1/operations/{op_id}/confirm"),
        ("POST", f"/v1/operations/{op_id}/cancel"),
    ):
        response = _http(ops_gateway, method, path, key=other.key)
        assert response.status_code == 404, (method, path)
    assert _http(ops_gateway, "GET", "/v1/operations", key=other.key).json()["data"] == []
    assert _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()["status"] == "AWAITING_CONFIRMATION"
    assert httpx.get(f"{ops_gateway.url}/v1/operations").status_code == 401
    assert contas.backend.stats()["total_executions"] == 0


def test_confirm_for_an_agent_no_longer_configured_is_409_and_stays_pending(
    ops_gateway: RunningGateway, contas: RunningContas, gateway_factory, database_url: str
) -> None:
    op_id = _pending(ops_gateway, contas)
    without_agent = gateway_factory(database_url=database_url)  # the same database, no agents
    response = _http(without_agent, "POST", f"/v1/operations/{op_id}/confirm", key=ops_gateway.key)
    assert response.status_code == 409 and response.json()["error"]["code"] == "agent_not_configured"
    assert _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()["status"] == "AWAITING_CONFIRMATION"
    assert contas.backend.stats()["total_executions"] == 0


@pytest.mark.parametrize("ops_gateway", [3], indirect=True)  # short (a busy machine took over 1 s to ask)
def test_an_expired_operation_cannot_be_confirmed(ops_gateway: RunningGateway, contas: RunningContas) -> None:
    op_id = _pending(ops_gateway, contas)

    def expired() -> bool:
        return _http(ops_gateway, "GET", f"/v1/operations/{op_id}").json()["status"] == "CANCELLED"

    wait_until(expired, timeout=60, interval=0.1, message="the pending operation to expire")
    response = _http(ops_gateway, "POST", f"/v1/operations/{op_id}/confirm")
    assert response.status_code == 409 and response.json()["error"]["code"] == "operation_expired"
    assert response.json()["operation"]["status_reason"].startswith("expired")
    assert contas.backend.stats()["total_executions"] == 0
