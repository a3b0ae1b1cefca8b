"""A "yes" answers one question: the reply is bound to the question the client shows, not to whatever
is pending when the request is read (docs/operations.md, "A yes answers one question").

The official ``openai`` client → Hatchway → the example ``contas`` MCP server; the scripted model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas, contas_model
from tests.support.gateway import RunningGateway
from tests.support.operations import operation
from tests.support.scripted_llm import Reply, ScriptedLLM

QUESTION_A = "Você confirma o cancelamento de Produto A?"


def chat(gw: RunningGateway, messages: list[dict[str, Any]], *, session: str = "tabs", **headers: str) -> Any:
    return gw.client().chat.completions.with_raw_response.create(
        model="agent:contas",
        messages=messages,
        extra_headers={"hatchway-session": session, "X-On-Behalf-Of": "ana", **headers},
    )


def text(raw: Any) -> str:
    return raw.parse().choices[0].message.content


def turn(user: str, assistant: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


YES = {"role": "user", "content": "sim"}


def test_a_yes_to_a_question_another_tab_replaced_does_not_confirm_the_new_one(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    first = chat(agent_gateway, [{"role": "user", "content": ASK}])
    assert text(first) == QUESTION
    first_id = first.headers["x-hatchway-operation-id"]
    # A second tab of the same conversation changes the request: the first question is cancelled.
    tab_2 = [*turn(ASK, QUESTION), {"role": "user", "content": "não, cancele o Produto A"}]
    second = chat(agent_gateway, tab_2)
    assert text(second) == QUESTION_A
    second_id = second.headers["x-hatchway-operation-id"]

    # The first tab still shows the first question, and its user says yes to it.
    stale = chat(agent_gateway, [*turn(ASK, QUESTION), YES])

    told = text(stale)
    assert told.startswith(f"Operation {first_id} (cancelar_vas_avulso) was not executed: CANCELLED")
    assert told.endswith(QUESTION_A)  # the question open now, which this yes did not answer
    assert contas.backend.stats()["total_executions"] == 0
    assert operation(agent_gateway, second_id)["status"] == "AWAITING_CONFIRMATION"

    # Said to the question it now shows, the yes confirms the new operation.
    done = chat(agent_gateway, [*turn(ASK, QUESTION), YES, {"role": "assistant", "content": told}, YES])
    assert text(done) == "SUCCESS — Produto A: cancelado."
    assert contas.backend.executions == {second_id: 1}


def test_a_yes_under_another_message_than_the_question_asks_the_question_again(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    op_id = asked.headers["x-hatchway-operation-id"]
    calls = len(llm.requests)
    # The client shows the user something else last (an earlier answer, another tab's text).
    elsewhere = [*turn("oi", "Olá! Como posso ajudar?"), YES]

    again = chat(agent_gateway, elsewhere)

    assert text(again) == QUESTION and again.headers["x-hatchway-operation-id"] == op_id
    assert len(llm.requests) == calls and contas.backend.stats()["total_executions"] == 0
    # Under the question, the same yes confirms it.
    confirmed = chat(agent_gateway, [*elsewhere, {"role": "assistant", "content": QUESTION}, YES])
    assert text(confirmed) == ANSWER and contas.backend.executions == {op_id: 1}


def test_a_client_that_keeps_the_question_but_rewrites_the_user_turns_is_still_bound(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    op_id = asked.headers["x-hatchway-operation-id"]
    # A client that trimmed the history and shows the question as markdown.
    shown = {"role": "assistant", "content": f"**{QUESTION}**\n"}

    assert text(chat(agent_gateway, [shown, YES])) == ANSWER
    assert contas.backend.executions == {op_id: 1}
    assert text(chat(agent_gateway, [shown, YES])).startswith(f"Operation {op_id} (cancelar_vas_avulso)")
    assert contas.backend.executions == {op_id: 1}


def test_an_echoed_operation_id_binds_a_reply_sent_alone(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    op_id = asked.headers["x-hatchway-operation-id"]

    first = chat(agent_gateway, [YES], **{"hatchway-operation-id": op_id})
    again = chat(agent_gateway, [YES], **{"hatchway-operation-id": op_id})

    assert text(first) == ANSWER
    assert text(again).startswith(f"Operation {op_id} (cancelar_vas_avulso) was confirmed already")
    assert contas.backend.executions == {op_id: 1}


def test_an_echoed_id_of_no_operation_of_the_agent_is_a_400_and_runs_nothing(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    chat(agent_gateway, [{"role": "user", "content": ASK}], session="one")
    for junk in ("op_unknown", "op_x" * 100, "' OR 1=1 --"):
        with pytest.raises(openai.BadRequestError) as refused:
            chat(agent_gateway, [YES], session="one", **{"hatchway-operation-id": junk})
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["code"] == "operation_not_found" and error["param"] == "hatchway-operation-id"
    assert contas.backend.stats()["total_executions"] == 0


def test_an_echoed_id_answers_that_operation_from_another_conversation_as_the_confirm_endpoint_would(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}], session="one")
    op_id = asked.headers["x-hatchway-operation-id"]
    with pytest.raises(openai.PermissionDeniedError):  # only its end user answers it
        chat(agent_gateway, [YES], session="two", **{"hatchway-operation-id": op_id, "X-On-Behalf-Of": "bob"})
    assert text(chat(agent_gateway, [YES], session="two", **{"hatchway-operation-id": op_id})) == ANSWER
    assert contas.backend.executions == {op_id: 1}


def test_a_bare_yes_moments_after_a_confirmation_is_that_confirmation_again(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    """A client that sends only the new message: its duplicate "sim" finds nothing pending, and is
    answered with the outcome of the operation it confirmed, not handed to the model."""
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    op_id = asked.headers["x-hatchway-operation-id"]
    assert text(chat(agent_gateway, [YES])) == ANSWER
    calls = len(llm.requests)

    again = chat(agent_gateway, [YES])

    assert text(again).startswith(f"Operation {op_id} (cancelar_vas_avulso) was confirmed already")
    assert len(llm.requests) == calls and contas.backend.executions == {op_id: 1}


def test_a_transactional_tool_without_confirmation_asks_before_repeating_a_recent_execution(
    contas: RunningContas, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """``require_confirmation: false``: the first call executes at once; the same call again (an SDK
    retrying the request, a model repeating itself) asks first, saying what it repeats."""
    rule = {"operation_type": "transactional", "require_confirmation": False, "requires": ["subject"]}
    rule["pre_validation"] = {"enabled": True, "tool": "validar_vas_subject", "fail_open": False}
    gw = gateway_factory(agents=[contas.agent(tmp_path / "c", policies={"cancelar_vas_avulso": rule})])
    llm.handler = contas_model

    assert text(chat(gw, [{"role": "user", "content": ASK}], session="s")) == ANSWER
    [first] = contas.backend.executions
    retried = chat(gw, [{"role": "user", "content": ASK}], session="s")

    question = text(retried)
    assert question.startswith(QUESTION) and f"This repeats operation {first}, confirmed" in question
    repeat = operation(gw, retried.headers["x-hatchway-operation-id"])
    assert repeat["status"] == "AWAITING_CONFIRMATION" and repeat["repeat_of"] == first
    assert contas.backend.stats()["total_executions"] == 1
    # Another session is another conversation: no repeat there.
    assert text(chat(gw, [{"role": "user", "content": ASK}], session="other")) == ANSWER
    assert contas.backend.stats()["total_executions"] == 2


def test_the_repeat_window_can_be_turned_off(
    contas: RunningContas, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    rule = {"operation_type": "transactional", "require_confirmation": False, "requires": ["subject"]}
    gw = gateway_factory(
        operations={"repeat_window_seconds": 0},
        agents=[contas.agent(tmp_path / "c", policies={"cancelar_vas_avulso": rule})],
    )
    llm.handler = lambda body: (
        Reply(tool_calls=[("cancelar_vas_avulso", {"subject": "Produto A"})])
        if body["messages"][-1]["role"] == "user"
        else Reply(text="feito")
    )
    for _ in range(2):
        assert text(chat(gw, [{"role": "user", "content": "cancele Produto A"}], session="s")) == "feito"
    assert contas.backend.stats()["total_executions"] == 2


# -- found by the red team ------------------------------------------------------------------------------


def _then_calls(tool: str) -> Any:
    """``contas_model``, except that once an operation has executed it calls ``tool`` (another tool
    whose validator words the same question) on the same items."""

    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            summary = json.loads(last["content"])
            if summary.get("status") == "COMPLETED" and summary.get("tool") != tool:
                return Reply(tool_calls=[(tool, {"subject": "Produto A, Produto B e Produto C"})])
        return contas_model(body)

    return model


def test_a_trimmed_history_retry_never_answers_a_newer_question_worded_alike(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    """The client keeps only [question, "sim"]; after the execution the model calls another tool
    whose validator asks the very same words. The SDK's retry of the "sim" must not execute it."""
    llm.handler = _then_calls("cancelar_vas_fluxo")
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    first = asked.headers["x-hatchway-operation-id"]
    trimmed = [{"role": "assistant", "content": QUESTION}, YES]

    answered = chat(agent_gateway, trimmed)  # executes, and the model's new call asks
    second = operation(agent_gateway, answered.headers["x-hatchway-operation-id"])
    assert second["tool"] == "cancelar_vas_fluxo" and second["repeat_of"] == first
    assert text(answered) != QUESTION and text(answered).startswith(QUESTION)  # its words are its own
    retried = chat(agent_gateway, trimmed)

    assert text(retried).startswith(f"Operation {first} (cancelar_vas_avulso) was confirmed already")
    assert contas.backend.executions == {first: 1}


def test_another_end_user_in_the_conversation_cannot_drop_a_pending_question(
    agent_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    def eager(body: dict[str, Any]) -> Reply:  # calls the tool for the request whatever came last
        if body["messages"][-1]["role"] == "tool":
            return contas_model(body)
        return Reply(tool_calls=[("cancelar_vas_avulso", {"subject": "Produto A"})])

    ana = chat(agent_gateway, [{"role": "user", "content": ASK}])
    ana_op = ana.headers["x-hatchway-operation-id"]
    llm.handler = eager
    # bob, in the same session, sends a request that ends with an assistant message: no reply is read.
    bob = agent_gateway.client().chat.completions.with_raw_response.create(
        model="agent:contas",
        messages=[
            {"role": "user", "content": "cancele Produto A"},
            {"role": "assistant", "content": "Certo."},
        ],
        extra_headers={"hatchway-session": "tabs", "X-On-Behalf-Of": "bob"},
    )
    assert "not asked" in text(bob) or "CANCELLED" in text(bob)
    assert operation(agent_gateway, ana_op)["status"] == "AWAITING_CONFIRMATION"

    llm.handler = contas_model
    assert text(chat(agent_gateway, [*turn(ASK, QUESTION), YES])) == ANSWER
    assert contas.backend.executions == {ana_op: 1}


def test_a_client_that_adds_a_footer_to_the_question_can_confirm(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    asked = chat(agent_gateway, [{"role": "user", "content": ASK}])
    op_id = asked.headers["x-hatchway-operation-id"]
    footer = "\n\n_Respostas geradas por IA podem conter erros._"

    assert text(chat(agent_gateway, [*turn(ASK, QUESTION + footer), YES])) == ANSWER
    assert contas.backend.executions == {op_id: 1}


def test_a_stream_names_its_operation_on_the_last_chunk_and_a_bare_client_can_echo_it(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    def streamed(messages: list[dict[str, Any]], **headers: str) -> tuple[str, str | None]:
        stream = agent_gateway.client().chat.completions.create(
            model="agent:contas",
            messages=messages,
            stream=True,
            extra_headers={"hatchway-session": "stream", "X-On-Behalf-Of": "ana", **headers},
        )
        content, about = "", None
        for chunk in stream:
            content += "".join(c.delta.content or "" for c in chunk.choices)
            about = (chunk.model_extra or {}).get("hatchway", {}).get("operation_id") or about
        return content, about

    question, op_id = streamed([{"role": "user", "content": ASK}])
    assert question == QUESTION and op_id is not None
    answer, about = streamed([YES], **{"hatchway-operation-id": op_id})
    assert answer == ANSWER and about is None
    again, about = streamed([YES], **{"hatchway-operation-id": op_id})
    assert (
        again.startswith(f"Operation {op_id} (cancelar_vas_avulso) was confirmed already") and about == op_id
    )
    assert contas.backend.executions == {op_id: 1}


def test_a_stateless_responses_client_confirms_by_echoing_the_operation(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    """No ``previous_response_id``, no ``hatchway-session``: each response is a conversation of its
    own, so only the echoed id can say which question the "sim" answers."""
    client = agent_gateway.client(default_headers={"X-On-Behalf-Of": "ana"})
    asked = client.responses.create(model="agent:contas", input=ASK)
    [op_id] = {json.loads(i.output)["operation_id"] for i in asked.output if i.type == "mcp_call"}
    history: Any = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": asked.output_text},
        {"role": "user", "content": "sim"},
    ]
    echo = {"hatchway-operation-id": op_id}

    assert (
        client.responses.create(model="agent:contas", input=history, extra_headers=echo).output_text == ANSWER
    )
    again = client.responses.create(model="agent:contas", input=history, extra_headers=echo).output_text
    assert again.startswith(f"Operation {op_id} (cancelar_vas_avulso) was confirmed already")
    assert contas.backend.executions == {op_id: 1}


def test_a_nul_in_what_the_user_asks_is_stored_cleaned_and_no_database_error_reaches_the_model(
    ops_gateway: RunningGateway, contas: RunningContas, llm: ScriptedLLM
) -> None:
    raw = chat(ops_gateway, [{"role": "user", "content": ASK + "\u0000"}])  # "Produto C\0" is no product
    question = text(raw)
    assert question.startswith("Você confirma o cancelamento de Produto A e Produto B?")
    op = operation(ops_gateway, raw.headers["x-hatchway-operation-id"])
    assert op["status"] == "AWAITING_CONFIRMATION" and "\u0000" not in json.dumps(op)
    told = json.dumps([m for request in llm.requests for m in request["messages"]])
    assert "SQL" not in told and "DBAPIError" not in told
    answer = text(chat(ops_gateway, [*turn(ASK + "\u0000", question), YES]))
    assert answer.startswith("PARTIAL_SUCCESS — Produto A: cancelado")
    assert contas.backend.executions == {op["id"]: 1}
