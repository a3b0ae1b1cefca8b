"""The OpenAI Agents SDK (``openai-agents``, in ``pyproject.toml``) with both of its models —
``OpenAIResponsesModel`` and ``OpenAIChatCompletionsModel`` — against Hatchway: a plain and a
streamed run (``run_streamed``), a function-tool round trip, a second turn, an ``agent:`` model
running the MCP loop in the gateway, the confirmation flow of an agent with ``tool_policies.yaml``,
and the upstream's 429 and a wrong key as the ``openai`` exceptions the SDK lets through. The tool
round trip in each way the Responses model can continue a conversation is
``tests/api/test_responses_agents_sdk.py``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import openai
import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # tests stay offline

import agents

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.scripted_llm import Reply, ScriptedLLM

APIS = ["responses", "chat"]
T = TypeVar("T")


@pytest.fixture(autouse=True)
def _tracing_off() -> None:
    agents.set_tracing_disabled(True)


def run(
    gateway,
    api: str,
    scenario: Callable[[Any], Coroutine[Any, Any, T]],
    *,
    model: str = "gpt-4o",
    key: str | None = None,
    headers: dict[str, str] | None = None,
) -> T:
    """``scenario(sdk_model)`` in one event loop, with a client of its own closed after."""

    async def go() -> T:
        client = openai.AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0, default_headers=headers
        )
        try:
            if api == "responses":
                sdk_model: Any = agents.OpenAIResponsesModel(model=model, openai_client=client)
            else:
                sdk_model = agents.OpenAIChatCompletionsModel(model=model, openai_client=client)
            return await scenario(sdk_model)
        finally:
            await client.close()

    return asyncio.run(go())


SETTINGS = agents.RunConfig(tracing_disabled=True)


async def streamed(agent: agents.Agent, prompt: Any) -> Any:
    result = agents.Runner.run_streamed(agent, prompt, run_config=SETTINGS)
    async for _ in result.stream_events():
        pass
    return result


@pytest.mark.parametrize("api", APIS)
def test_plain_streamed_and_a_second_turn(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = lambda body: Reply(text=f"Turn {sum(1 for m in body['messages'] if m['role'] == 'user')}.")

    async def scenario(model: Any) -> tuple[str, str]:
        agent = agents.Agent(name="a", instructions="Answer.", model=model)
        first = await agents.Runner.run(agent, "hello", run_config=SETTINGS)
        second = await streamed(agent, [*first.to_input_list(), {"role": "user", "content": "again"}])
        return str(first.final_output), str(second.final_output)

    assert run(gateway, api, scenario) == ("Turn 1.", "Turn 2.")


@pytest.mark.parametrize("api", APIS)
def test_a_client_tool_round_trip(gateway, llm: ScriptedLLM, api: str) -> None:
    llm.handler = conversation_model
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return "sunny"

    async def scenario(model: Any) -> str:
        agent = agents.Agent(name="weather", model=model, tools=[get_weather])
        result = await streamed(agent, "what is the weather in Faro?")
        return str(result.final_output)

    assert run(gateway, api, scenario) == "It is sunny."
    assert asked == ["Faro"]


@pytest.mark.parametrize("api", APIS)
def test_an_agent_model_runs_the_mcp_loop_streamed(calc_gateway: CalcGateway, api: str) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server

    async def scenario(model: Any) -> str:
        result = await streamed(agents.Agent(name="calc", model=model), "add 2 and 3")
        return str(result.final_output)

    output = run(gateway, api, scenario, model="agent:calc")

    assert output.startswith("The sum is") and "5" in output
    assert server.tool_calls("add") == 1


@pytest.mark.parametrize("api", APIS)
def test_the_confirmation_flow_of_an_agent_with_tool_policies(
    agent_gateway, contas: RunningContas, api: str
) -> None:
    headers = {"X-On-Behalf-Of": "ana", "hatchway-session": f"agents-sdk-{api}"}
    executions_when_asked: list[int] = []

    async def scenario(model: Any) -> tuple[str, str]:
        agent = agents.Agent(name="contas", model=model)
        asked = await agents.Runner.run(agent, ASK, run_config=SETTINGS)
        executions_when_asked.append(contas.backend.stats()["total_executions"])
        turn = [*asked.to_input_list(), {"role": "user", "content": "sim"}]
        confirmed = await agents.Runner.run(agent, turn, run_config=SETTINGS)
        return str(asked.final_output), str(confirmed.final_output)

    assert run(agent_gateway, api, scenario, model="agent:contas", headers=headers) == (QUESTION, ANSWER)
    assert executions_when_asked == [0]
    assert list(contas.backend.executions.values()) == [1]


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_429_and_a_wrong_key_are_the_openai_exceptions(
    gateway, llm: ScriptedLLM, api: str
) -> None:
    llm.reply(status=429, error="slow down")

    async def ask(model: Any) -> Any:
        return await streamed(agents.Agent(name="a", model=model), "hi")

    with pytest.raises(openai.RateLimitError):
        run(gateway, api, ask)
    with pytest.raises(openai.AuthenticationError):
        run(gateway, api, ask, key="hw-wrong")
