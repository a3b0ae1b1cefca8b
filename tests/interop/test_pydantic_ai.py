"""pydantic-ai (``pydantic-ai-slim[openai]``, pinned in ``pyproject.toml``) against Hatchway with a
base URL and a key: its Chat Completions model and its Responses model, plain and streamed, a
client tool round trip, a second turn, an ``agent:`` model running the MCP loop in the gateway
(streamed: pydantic-ai asserts OpenAI's ``mcp_call`` event order), the confirmation flow of an agent
with ``tool_policies.yaml``, and the upstream's 429 and a wrong key as its ``ModelHTTPError``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.scripted_llm import ScriptedLLM

APIS = ["chat", "responses"]
T = TypeVar("T")


CLIENTS: list[openai.AsyncOpenAI] = []


def model(gateway, api: str, name: str = "gpt-4o", key: str | None = None) -> Any:
    """pydantic-ai's model on Hatchway; the SDK's own retries off, so a 429 reaches the test."""
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0)
    CLIENTS.append(client)
    provider = OpenAIProvider(openai_client=client)
    if api == "chat":
        return OpenAIChatModel(name, provider=provider)
    return OpenAIResponsesModel(name, provider=provider)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` in one event loop (the client's pool belongs to it), its clients closed after."""

    async def go() -> T:
        try:
            return await coro
        finally:
            while CLIENTS:
                await CLIENTS.pop().close()

    return asyncio.run(go())


async def streamed(agent: Agent, prompt: str, **kwargs: Any) -> str:
    async with agent.run_stream(prompt, **kwargs) as result:
        return await result.get_output()


@pytest.mark.parametrize("api", APIS)
def test_plain_and_streamed_answers_and_a_second_turn(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = conversation_model
    agent = Agent(model(gateway, api))

    async def turns() -> tuple[str, str]:
        first = await agent.run("hello")
        return first.output, await streamed(agent, "again", message_history=first.all_messages())

    assert run(turns()) == ("Turn 1.", "Turn 2.")


@pytest.mark.parametrize("api", APIS)
def test_a_client_tool_round_trip(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = conversation_model
    agent = Agent(model(gateway, api))
    asked: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        asked.append(city)
        return "sunny"

    async def both() -> tuple[str, str]:
        plain = await agent.run("what is the weather in Faro?")
        return plain.output, await streamed(agent, "and the weather now?")

    assert run(both()) == ("It is sunny.", "It is sunny.")
    assert asked == ["Faro", "Faro"]


@pytest.mark.parametrize("api", APIS)
def test_an_agent_model_runs_the_mcp_loop_streamed(calc_gateway: CalcGateway, api: str) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server
    agent = Agent(model(gateway, api, "agent:calc"))

    output = run(streamed(agent, "add 2 and 3"))

    assert output.startswith("The sum is") and "5" in output
    assert server.tool_calls("add") == 1


@pytest.mark.parametrize("api", APIS)
def test_the_confirmation_flow_of_an_agent_with_tool_policies(
    agent_gateway, contas: RunningContas, api: str
) -> None:
    agent = Agent(model(agent_gateway, api, "agent:contas"))
    headers = {"X-On-Behalf-Of": "ana", "hatchway-session": f"pydantic-{api}"}

    asked = agent.run_sync(ASK, model_settings={"extra_headers": headers})
    assert asked.output == QUESTION
    assert contas.backend.stats()["total_executions"] == 0

    confirmed = agent.run_sync(
        "sim", message_history=asked.all_messages(), model_settings={"extra_headers": headers}
    )
    assert confirmed.output == ANSWER
    assert list(contas.backend.executions.values()) == [1]


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_429_and_a_wrong_key_are_its_model_http_errors(
    gateway, llm: ScriptedLLM, api: str
) -> None:
    llm.reply(status=429, error="slow down")
    with pytest.raises(ModelHTTPError) as limited:
        run(streamed(Agent(model(gateway, api)), "hi"))
    assert limited.value.status_code == 429

    with pytest.raises(ModelHTTPError) as refused:
        run(Agent(model(gateway, api, key="hw-wrong")).run("hi"))
    assert refused.value.status_code == 401
