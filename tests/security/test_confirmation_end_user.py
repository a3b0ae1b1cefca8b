"""Only the end user an operation was requested for confirms or cancels it — in the chat, on the Responses
API and through ``/v1/operations`` — whoever else holds the organisation's key. Anyone else gets 403
``confirmation_not_yours`` and the operation stays pending for its end user."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.operations import operation


def chat(gw: RunningGateway, messages: list[dict[str, Any]], user: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {gw.key}", "hatchway-session": "conv-1"}
    if user is not None:
        headers["X-On-Behalf-Of"] = user
    body = {"model": "agent:contas", "messages": messages}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def ask_for(gw: RunningGateway, user: str | None) -> tuple[list[dict[str, Any]], str]:
    response = chat(gw, [{"role": "user", "content": ASK}], user)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == QUESTION
    conversation = [{"role": "user", "content": ASK}, {"role": "assistant", "content": QUESTION}]
    return conversation, response.headers["x-hatchway-operation-id"]


def api(gw: RunningGateway, op_id: str, action: str, user: str | None) -> httpx.Response:
    headers = {"authorization": f"Bearer {gw.key}"}
    if user is not None:
        headers["X-On-Behalf-Of"] = user
    return httpx.post(f"{gw.url}/v1/operations/{op_id}/{action}", headers=headers, timeout=30)


def refused(response: httpx.Response) -> bool:
    return response.status_code == 403 and response.json()["error"]["code"] == "confirmation_not_yours"


@pytest.mark.parametrize("intruder", ["mallory", None])
@pytest.mark.parametrize("reply", ["sim", "não"])
def test_another_users_reply_in_the_chat_neither_confirms_nor_cancels(
    agent_gateway: RunningGateway, contas: RunningContas, intruder: str | None, reply: str
) -> None:
    conversation, op_id = ask_for(agent_gateway, "ana")

    response = chat(agent_gateway, [*conversation, {"role": "user", "content": reply}], intruder)

    assert refused(response) and "ana" not in response.text  # nor is the end user named
    assert operation(agent_gateway, op_id)["status"] == "AWAITING_CONFIRMATION"
    assert contas.backend.stats()["total_executions"] == 0
    confirmed = chat(agent_gateway, [*conversation, {"role": "user", "content": "sim"}], "ana")
    assert confirmed.json()["choices"][0]["message"]["content"] == ANSWER
    assert contas.backend.executions == {op_id: 1}


@pytest.mark.parametrize("action", ["confirm", "cancel"])
def test_another_user_cannot_confirm_or_cancel_through_the_api(
    agent_gateway: RunningGateway, contas: RunningContas, action: str
) -> None:
    _, op_id = ask_for(agent_gateway, "ana")

    for intruder in ("mallory", None):
        assert refused(api(agent_gateway, op_id, action, intruder))
    assert operation(agent_gateway, op_id)["status"] == "AWAITING_CONFIRMATION"

    assert api(agent_gateway, op_id, action, "ana").status_code == 200
    assert contas.backend.stats()["total_executions"] == (1 if action == "confirm" else 0)


def test_another_user_cannot_confirm_in_a_responses_chain(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    ana = agent_gateway.client(default_headers={"X-On-Behalf-Of": "ana"})
    mallory = agent_gateway.client(default_headers={"X-On-Behalf-Of": "mallory"})
    first = ana.responses.create(model="agent:contas", input=ASK)
    assert first.output_text == QUESTION

    with pytest.raises(openai.PermissionDeniedError) as caught:
        mallory.responses.create(model="agent:contas", input="sim", previous_response_id=first.id)

    assert caught.value.code == "confirmation_not_yours"
    assert contas.backend.stats()["total_executions"] == 0
    second = ana.responses.create(model="agent:contas", input="sim", previous_response_id=first.id)
    assert second.output_text == ANSWER


def test_an_operation_requested_with_no_end_user_is_decided_only_without_one(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    conversation, op_id = ask_for(agent_gateway, None)

    assert refused(chat(agent_gateway, [*conversation, {"role": "user", "content": "sim"}], "mallory"))
    assert refused(api(agent_gateway, op_id, "confirm", "mallory"))
    assert contas.backend.stats()["total_executions"] == 0

    assert api(agent_gateway, op_id, "confirm", None).status_code == 200
    assert contas.backend.executions == {op_id: 1}
