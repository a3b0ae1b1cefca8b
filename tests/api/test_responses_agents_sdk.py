"""The OpenAI Agents SDK (``openai-agents``) runs an agent with a function tool against Hatchway."""

from __future__ import annotations

import asyncio
import json
import os

import openai
import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # tests stay offline

agents = pytest.importorskip("agents")

from tests.support.scripted_llm import ScriptedLLM  # noqa: E402
from tests.support.servers import wait_until  # noqa: E402


@pytest.fixture(autouse=True)
def _tracing_off() -> None:
    agents.set_tracing_disabled(True)


def _run_agent(gateway, *, stream: bool, previous_response_ids: bool = False) -> tuple[str, list[str]]:
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        calls.append(city)
        return f"22°C and sunny in {city}"

    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
        try:
            model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
            agent = agents.Agent(
                name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model
            )
            settings = agents.RunConfig(tracing_disabled=True)
            if stream:
                run = agents.Runner.run_streamed(agent, "Weather in Lisbon?", run_config=settings)
                async for _ in run.stream_events():
                    pass
                return str(run.final_output)
            result = await agents.Runner.run(
                agent,
                "Weather in Lisbon?",
                run_config=settings,
                auto_previous_response_id=previous_response_ids,
            )
            return str(result.final_output)
        finally:
            await client.close()

    return asyncio.run(main()), calls


@pytest.mark.parametrize("mode", ["full_history", "previous_response_id", "streamed"])
def test_agents_sdk_runs_an_agent_with_a_function_tool(gateway, llm: ScriptedLLM, mode: str) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "Lisbon"}, "call_w1")])
    llm.reply("It is 22°C and sunny in Lisbon.")

    output, calls = _run_agent(
        gateway, stream=mode == "streamed", previous_response_ids=mode == "previous_response_id"
    )

    assert output == "It is 22°C and sunny in Lisbon."
    assert calls == ["Lisbon"]
    first, second = llm.requests
    assert first["messages"][0] == {"role": "system", "content": "Answer with the tool."}
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_w1"
    assert "22°C and sunny in Lisbon" in tool_message["content"]
    assert json.loads(second["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Lisbon"}
    client = gateway.client()
    wait_until(lambda: len(client.get("/logs", cast_to=object)["data"]) == 2, message="both log records")
    records = client.get("/logs", cast_to=object)["data"]
    latest = client.responses.retrieve(records[0]["response_id"])
    sent_types = [i.type for i in client.responses.input_items.list(latest.id, order="asc").data]
    if mode == "previous_response_id":
        assert latest.previous_response_id == records[1]["response_id"]
        assert sent_types == ["function_call_output"]
    else:
        assert latest.previous_response_id is None
        assert sent_types == ["message", "function_call", "function_call_output"]
