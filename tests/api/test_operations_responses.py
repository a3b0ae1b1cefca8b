"""Transactional operations over the Responses API: the pending operation belongs to the response
chain (its root response id), so the user's "sim" in a response chained with
``previous_response_id`` confirms it."""

from __future__ import annotations

import json

from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.operations import operation
from tests.support.scripted_llm import ScriptedLLM


def test_confirmed_in_the_chain_executes_once(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    client = agent_gateway.client()
    who = {"X-On-Behalf-Of": "ana"}
    first = client.responses.create(model="agent:contas", input=ASK, extra_headers=who)
    assert first.status == "completed" and first.output_text == QUESTION
    [call] = [item for item in first.output if item.type == "mcp_call"]
    asked = json.loads(call.output)
    assert call.name == "cancelar_vas_avulso" and asked["status"] == "AWAITING_CONFIRMATION"
    op_id = asked["operation_id"]
    assert operation(agent_gateway, op_id)["session_key"] == first.id  # the chain's root
    assert contas.backend.stats()["total_executions"] == 0

    # An unrelated response (a new chain) cannot confirm it.
    other = client.responses.create(model="agent:contas", input="sim")
    assert other.output_text == "Posso ajudar em algo mais?"
    assert contas.backend.stats()["total_executions"] == 0

    second = client.responses.create(
        model="agent:contas",
        input="sim",
        previous_response_id=first.id,
        extra_headers={"X-On-Behalf-Of": "ana"},
    )
    assert second.status == "completed" and second.output_text == ANSWER
    assert contas.backend.executions == {op_id: 1}
    [executed] = [item for item in second.output if item.type == "mcp_call"]
    assert json.loads(executed.output)["verdict"] == "PARTIAL_SUCCESS"
    record = operation(agent_gateway, op_id)
    assert record["status"] == "COMPLETED" and record["confirmed_by"] == "ana"
    assert [(i["name"], i["success"]) for i in record["items"]] == [
        ("Produto A", True),
        ("Produto B", False),
        ("Produto C", True),
    ]
    # The model saw the whole chain, every call id once.
    sent = llm.requests[-1]["messages"]
    ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)) == 2

    third = client.responses.create(model="agent:contas", input="sim", previous_response_id=second.id)
    assert third.output_text == "Posso ajudar em algo mais?"
    assert contas.backend.executions == {op_id: 1}


def test_no_in_the_chain_cancels(agent_gateway: RunningGateway, contas: RunningContas) -> None:
    client = agent_gateway.client()
    first = client.responses.create(model="agent:contas", input=ASK)
    answer = client.responses.create(model="agent:contas", input="no", previous_response_id=first.id)
    assert answer.output_text == "CANCELLED: cancelled by the user's reply"
    assert contas.backend.stats()["total_executions"] == 0


def test_streamed_responses_carry_the_question(agent_gateway: RunningGateway, contas: RunningContas) -> None:
    client = agent_gateway.client()
    with client.responses.stream(model="agent:contas", input=ASK) as stream:
        final = stream.get_final_response()
    assert final.output_text == QUESTION
    again = client.responses.create(model="agent:contas", input="sim", previous_response_id=final.id)
    assert again.output_text == ANSWER
    assert contas.backend.stats()["total_executions"] == 1
