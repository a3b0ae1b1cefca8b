"""LangChain's ``ChatOpenAI`` (``langchain-openai``, pinned in ``pyproject.toml``) against Hatchway
with a base URL and a key, on Chat Completions and with ``use_responses_api=True``: plain and
streamed answers, a client tool round trip, a second turn, an ``agent:`` model running the MCP
loop in the gateway, the confirmation flow of an agent with ``tool_policies.yaml``, and the
upstream's 429 and a wrong key as the ``openai`` exceptions LangChain raises."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.scripted_llm import ScriptedLLM

APIS = ["chat", "responses"]


def chat_model(gateway, api: str, model: str = "gpt-4o", key: str | None = None, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=f"{gateway.url}/v1",
        api_key=key or gateway.key,
        max_retries=0,
        use_responses_api=api == "responses",
        **kwargs,
    )


def text_of(message: Any) -> str:
    """An AIMessage's text (a string on Chat Completions, content blocks on the Responses API)."""
    return message.text if isinstance(message.text, str) else message.text()


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@pytest.mark.parametrize("api", APIS)
def test_plain_streamed_and_a_second_turn(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = conversation_model
    model = chat_model(gateway, api)

    first = model.invoke([HumanMessage("hello")])
    assert text_of(first) == "Turn 1."
    streamed = "".join(
        text_of(chunk) for chunk in model.stream([HumanMessage("hello"), first, HumanMessage("again")])
    )
    assert streamed == "Turn 2."


@pytest.mark.parametrize("api", APIS)
def test_a_client_tool_round_trip(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = conversation_model
    model = chat_model(gateway, api).bind_tools([get_weather])
    asked = [HumanMessage("what is the weather in Faro?")]

    call: AIMessage = model.invoke(asked)
    [tool_call] = call.tool_calls
    assert (tool_call["name"], tool_call["args"]) == ("get_weather", {"city": "Faro"})
    result = get_weather.invoke(tool_call["args"])
    answer = model.invoke([*asked, call, ToolMessage(result, tool_call_id=tool_call["id"])])

    assert text_of(answer) == "It is sunny."


@pytest.mark.parametrize("api", APIS)
def test_an_agent_model_runs_the_mcp_loop(calc_gateway: CalcGateway, api: str) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server
    model = chat_model(gateway, api, "agent:calc")

    streamed = "".join(text_of(chunk) for chunk in model.stream([HumanMessage("add 2 and 3")]))

    assert streamed.startswith("The sum is") and "5" in streamed
    assert server.tool_calls("add") == 1


@pytest.mark.parametrize("api", APIS)
def test_the_confirmation_flow_of_an_agent_with_tool_policies(
    agent_gateway, contas: RunningContas, api: str
) -> None:
    headers = {"X-On-Behalf-Of": "ana", "hatchway-session": f"langchain-{api}"}
    model = chat_model(agent_gateway, api, "agent:contas", default_headers=headers)

    asked = model.invoke([HumanMessage(ASK)])
    assert text_of(asked) == QUESTION
    assert contas.backend.stats()["total_executions"] == 0

    confirmed = model.invoke([HumanMessage(ASK), AIMessage(QUESTION), HumanMessage("sim")])
    assert text_of(confirmed) == ANSWER
    assert list(contas.backend.executions.values()) == [1]


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_429_and_a_wrong_key_are_the_openai_exceptions(
    gateway, llm: ScriptedLLM, api: str
) -> None:
    llm.reply(status=429, error="slow down")
    with pytest.raises(openai.RateLimitError):
        list(chat_model(gateway, api).stream([HumanMessage("hi")]))

    with pytest.raises(openai.AuthenticationError):
        chat_model(gateway, api, key="hw-wrong").invoke([HumanMessage("hi")])
