"""Transactional operations end to end over Chat Completions: the official ``openai`` client →
Hatchway → the example ``contas`` MCP server (through the MCP pool), the scripted model deciding
the calls. Confirmation comes from the next user message of the same ``hatchway-session``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas, contas_model
from tests.support.gateway import RunningGateway
from tests.support.operations import operation
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port


def chat(
    gw: RunningGateway, messages: list[dict[str, Any]], *, session: str | None = "conv-1", user: str = "ana"
) -> Any:
    headers = {"X-On-Behalf-Of": user}
    if session is not None:
        headers["hatchway-session"] = session
    return gw.client().chat.completions.with_raw_response.create(
        model="agent:contas", messages=messages, extra_headers=headers
    )


def ask(gw: RunningGateway, session: str = "conv-1") -> tuple[list[dict[str, Any]], str]:
    """Turn 1: the request; returns the conversation so far and the pending operation's id."""
    raw = chat(gw, [{"role": "user", "content": ASK}], session=session)
    question = raw.parse().choices[0].message.content
    assert question == QUESTION
    return [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": question},
    ], raw.headers["x-hatchway-operation-id"]


def test_confirmed_in_the_next_message_executes_once_with_per_item_outcomes(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    conversation, op_id = ask(agent_gateway)
    assert contas.backend.stats()["total_executions"] == 0  # only the validator ran
    assert [c["tool"] for c in contas.backend.calls] == ["validar_vas_subject"]
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert offered == {"cancelar_vas_avulso", "cancelar_vas_lote", "cancelar_vas_fluxo", "consultar_pedidos"}
    pending = operation(agent_gateway, op_id)
    assert pending["status"] == "AWAITING_CONFIRMATION" and pending["session_key"] == "conv-1"

    raw = chat(agent_gateway, [*conversation, {"role": "user", "content": "sim"}], user="ana")
    assert raw.parse().choices[0].message.content == ANSWER
    assert contas.backend.executions == {op_id: 1}

    record = operation(agent_gateway, op_id)
    assert record["status"] == "COMPLETED" and record["verdict"]["status"] == "PARTIAL_SUCCESS"
    assert record["arguments"] == {"subject": "Produto A, Produto B e Produto C"}
    assert [i["id"] for i in record["resolved_arguments"]["items"]] == ["1001", "1002", "1003"]
    assert len(record["arguments_digest"]) == 64 and record["confirmation_message"] == QUESTION
    assert record["requested_by"] == "ana" and record["confirmed_by"] == "ana"
    assert record["confirmed_via"] == "reply"
    assert all(record[k] for k in ("created_at", "confirmed_at", "started_at", "completed_at"))
    assert [(i["name"], i["success"], i.get("error")) for i in record["items"]] == [
        ("Produto A", True, None),
        ("Produto B", False, "not_found"),
        ("Produto C", True, None),
    ]
    assert record["result"]["results"][1] == {
        "name": "Produto B",
        "id": "1002",
        "success": False,
        "error": "not_found",
    }
    [call] = [c for c in contas.backend.calls if c["tool"] == "cancelar_vas_avulso"]
    assert call["idempotency_key"] == op_id

    # What the model read after the confirmation: the operation's compact per-item summary.
    summary = json.loads(llm.requests[-1]["messages"][-1]["content"])
    assert summary["operation_id"] == op_id and summary["verdict"] == "PARTIAL_SUCCESS"

    # A client retry of the same "sim": answered with the outcome by the gateway, the model not called.
    calls = len(llm.requests)
    again = chat(agent_gateway, [*conversation, {"role": "user", "content": "sim"}])
    told = again.parse().choices[0].message.content
    assert told.startswith(f"Operation {op_id} (cancelar_vas_avulso) was confirmed already and executed once")
    assert "PARTIAL_SUCCESS" in told and "Produto B (1002): failed (not_found)" in told
    assert again.headers["x-hatchway-operation-id"] == op_id
    assert len(llm.requests) == calls and contas.backend.executions == {op_id: 1}


def test_no_cancels_and_nothing_runs(agent_gateway: RunningGateway, contas: RunningContas) -> None:
    conversation, op_id = ask(agent_gateway)
    raw = chat(agent_gateway, [*conversation, {"role": "user", "content": "Não."}])
    assert raw.parse().choices[0].message.content == "CANCELLED: cancelled by the user's reply"
    assert operation(agent_gateway, op_id)["status"] == "CANCELLED"
    assert contas.backend.stats()["total_executions"] == 0


def test_an_ambiguous_reply_asks_again_without_calling_the_model(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    conversation, op_id = ask(agent_gateway)
    calls = len(llm.requests)
    unsure = [*conversation, {"role": "user", "content": "sim, mas não o B"}]
    raw = chat(agent_gateway, unsure)
    assert raw.parse().choices[0].message.content == QUESTION
    assert len(llm.requests) == calls and contas.backend.stats()["total_executions"] == 0
    assert operation(agent_gateway, op_id)["status"] == "AWAITING_CONFIRMATION"

    confirmed = chat(
        agent_gateway,
        [*unsure, {"role": "assistant", "content": QUESTION}, {"role": "user", "content": "pode cancelar"}],
    )
    assert confirmed.parse().choices[0].message.content == ANSWER
    assert contas.backend.executions == {op_id: 1}


def test_a_no_with_a_new_request_cancels_and_asks_about_the_new_one(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    conversation, first = ask(agent_gateway)
    raw = chat(agent_gateway, [*conversation, {"role": "user", "content": "não, cancele o Produto A"}])
    assert raw.parse().choices[0].message.content == "Você confirma o cancelamento de Produto A?"
    second = raw.headers["x-hatchway-operation-id"]
    assert second != first and operation(agent_gateway, first)["status"] == "CANCELLED"
    assert operation(agent_gateway, second)["resolved_arguments"]["items"] == [
        {"name": "Produto A", "id": "1001"}
    ]
    assert contas.backend.stats()["total_executions"] == 0


def test_not_eligible_is_out_of_scope_and_nothing_runs(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    raw = chat(agent_gateway, [{"role": "user", "content": "cancele Produto Z"}])
    assert raw.parse().choices[0].message.content == (
        "OUT_OF_SCOPE: Produto Z não está contratado nesta conta"
    )
    assert "x-hatchway-operation-id" not in raw.headers
    [op] = _operations(agent_gateway)
    assert op["status"] == "OUT_OF_SCOPE" and op["pre_validation"]["eligible"] is False
    assert [c["tool"] for c in contas.backend.calls] == ["validar_vas_subject"]


@pytest.mark.parametrize("validator", ["server down", "validator error"])
def test_a_failing_validator_with_fail_open_false_fails_and_nothing_runs(
    contas: RunningContas, gateway_factory, llm: ScriptedLLM, tmp_path: Path, validator: str
) -> None:
    llm.handler = contas_model
    if validator == "server down":
        agent = contas.agent(tmp_path / "a", server={"url": f"http://127.0.0.1:{free_port()}/mcp"})
    else:
        rule = {"operation_type": "transactional", "require_confirmation": True, "requires": ["subject"]}
        rule["pre_validation"] = {"enabled": True, "tool": "validar_inexistente", "fail_open": False}
        agent = contas.agent(tmp_path / "a", policies={"cancelar_vas_avulso": rule})
    gw = gateway_factory(agents=[agent])

    raw = chat(gw, [{"role": "user", "content": ASK}])

    assert raw.parse().choices[0].message.content.startswith("FAILED: validator ")
    [op] = _operations(gw)
    assert op["status"] == "FAILED" and op["error"]["code"] == "validator_failed"
    assert all(c["tool"] != "cancelar_vas_avulso" for c in contas.backend.calls)
    assert contas.backend.stats()["total_executions"] == 0


def test_a_missing_subject_is_asked_for_and_nothing_runs(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] != "tool":
            return Reply(tool_calls=[("cancelar_vas_avulso", {})])
        error = json.loads(last["content"])["error"]
        return Reply(text=f"{error['code']}: {error['missing']}")

    llm.handler = model
    raw = chat(agent_gateway, [{"role": "user", "content": "quero cancelar uns serviços"}])
    assert raw.parse().choices[0].message.content == "missing_arguments: ['subject']"
    told = json.loads(llm.requests[-1]["messages"][-1]["content"])["error"]["message"]
    assert "Ask the user for it" in told and "Quais serviços você quer cancelar?" in told
    [op] = _operations(agent_gateway)
    assert op["status"] == "COLLECTING_PARAMETERS" and op["status_reason"] == "missing: subject"
    assert contas.backend.calls == []  # not even the validator


def test_streaming_sends_the_question_and_the_answer(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    client = agent_gateway.client()
    headers = {"hatchway-session": "stream-1"}
    question = _streamed(
        client.chat.completions.create(
            model="agent:contas",
            messages=[{"role": "user", "content": ASK}],
            stream=True,
            extra_headers=headers,
        )
    )
    assert question == QUESTION
    messages = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": question},
        {"role": "user", "content": "sim"},
    ]
    answer = _streamed(
        client.chat.completions.create(
            model="agent:contas", messages=messages, stream=True, extra_headers=headers
        )
    )
    assert answer == ANSWER
    assert contas.backend.stats()["total_executions"] == 1


def test_a_session_key_longer_than_256_characters_is_a_400(agent_gateway: RunningGateway) -> None:
    response = httpx.post(
        f"{agent_gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {agent_gateway.key}", "hatchway-session": "s" * 257},
        json={"model": "agent:contas", "messages": [{"role": "user", "content": ASK}]},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "hatchway-session"
    assert "at most 256" in response.json()["error"]["message"]


def _streamed(stream: Any) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def _operations(gw: RunningGateway) -> list[dict[str, Any]]:
    response = httpx.get(f"{gw.url}/v1/operations", headers={"authorization": f"Bearer {gw.key}"}, timeout=10)
    assert response.status_code == 200
    return response.json()["data"]


def test_without_a_session_only_the_confirm_endpoint_confirms(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    raw = chat(agent_gateway, [{"role": "user", "content": ASK}], session=None)
    assert raw.parse().choices[0].message.content == QUESTION
    op_id = raw.headers["x-hatchway-operation-id"]
    turn_2 = [{"role": "user", "content": ASK}, {"role": "assistant", "content": QUESTION}]
    unbound = chat(agent_gateway, [*turn_2, {"role": "user", "content": "sim"}], session=None)
    assert unbound.parse().choices[0].message.content == "Posso ajudar em algo mais?"
    assert contas.backend.stats()["total_executions"] == 0

    confirmed = httpx.post(
        f"{agent_gateway.url}/v1/operations/{op_id}/confirm",
        headers={"authorization": f"Bearer {agent_gateway.key}", "X-On-Behalf-Of": "ana"},
        json={"confirm": True},
        timeout=30,
    )
    assert confirmed.status_code == 200 and confirmed.json()["verdict"]["status"] == "PARTIAL_SUCCESS"
    assert confirmed.json()["confirmed_via"] == "api" and contas.backend.executions == {op_id: 1}
