"""The official Python ``openai`` client against Hatchway, sync and async, on both APIs: plain and
streamed answers (``responses.stream()`` included), structured output (``responses.parse``), a
client tool round trip, a second turn, an ``agent:`` model running the MCP loop, and the
upstream's 429 and a wrong key as ``RateLimitError`` and ``AuthenticationError``, streamed or not.
The rest of what this client does is tested where the feature is: the confirmation flow
(``tests/api/test_operations_chat.py``, ``test_operations_responses.py``), WebSocket mode
(``test_responses_socket.py``), ``/v1/responses/compact`` (``test_open_responses_compliance.py``)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from pydantic import BaseModel

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.scripted_llm import ScriptedLLM

WEATHER_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER = {"type": "function", "name": "get_weather", "parameters": WEATHER_CHAT["function"]["parameters"]}


class Forecast(BaseModel):
    city: str
    sunny: bool


def test_sync_client_both_apis(gateway, llm: ScriptedLLM) -> None:
    llm.handler = conversation_model
    client = gateway.client()
    hello = [{"role": "user", "content": "hello"}]

    first = client.chat.completions.create(model="gpt-4o", messages=hello)
    assert first.choices[0].message.content == "Turn 1."
    chunks = client.chat.completions.create(model="gpt-4o", messages=hello, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Turn 1."
    again = [*hello, {"role": "assistant", "content": "Turn 1."}, {"role": "user", "content": "again"}]
    assert (
        client.chat.completions.create(model="gpt-4o", messages=again).choices[0].message.content == "Turn 2."
    )

    response = client.responses.create(model="gpt-4o", input="hello")
    assert response.output_text == "Turn 1."
    with client.responses.stream(model="gpt-4o", input="again", previous_response_id=response.id) as stream:
        assert stream.get_final_response().output_text == "Turn 2."

    parsed = client.responses.parse(model="gpt-4o", input="forecast?", text_format=Forecast)
    assert parsed.output_parsed == Forecast(city="Faro", sunny=True)


def test_a_client_tool_round_trip_on_both_apis(gateway, llm: ScriptedLLM) -> None:
    llm.handler = conversation_model
    client = gateway.client()

    asked = [{"role": "user", "content": "what is the weather in Faro?"}]
    message = (
        client.chat.completions.create(model="gpt-4o", messages=asked, tools=[WEATHER_CHAT])
        .choices[0]
        .message
    )
    [call] = message.tool_calls
    answered = [
        *asked,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    final = client.chat.completions.create(model="gpt-4o", messages=answered, tools=[WEATHER_CHAT])
    assert final.choices[0].message.content == "It is sunny."

    first = client.responses.create(model="gpt-4o", input="what is the weather in Faro?", tools=[WEATHER])
    [fc] = [i for i in first.output if i.type == "function_call"]
    second = client.responses.create(
        model="gpt-4o",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}],
        tools=[WEATHER],
    )
    assert (fc.name, second.output_text) == ("get_weather", "It is sunny.")


def test_async_client_and_an_agent_model_running_the_mcp_loop(calc_gateway: CalcGateway) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server

    async def both() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
        try:
            chat = await client.chat.completions.create(
                model="agent:calc", messages=[{"role": "user", "content": "add 2 and 3"}]
            )
            text = ""
            async with client.responses.stream(model="agent:calc", input="add 2 and 3") as stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        text += event.delta
            return [chat.choices[0].message.content or "", text]
        finally:
            await client.close()

    answers = asyncio.run(both())

    assert all(a.startswith("The sum is") and "5" in a for a in answers), answers
    assert server.tool_calls("add") == 2


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_429_and_a_wrong_key_are_the_clients_own_errors(
    gateway, llm: ScriptedLLM, stream: bool
) -> None:
    client = gateway.client()
    llm.reply(status=429, error="slow down")
    with pytest.raises(openai.RateLimitError):
        client.with_options(max_retries=0).responses.create(model="gpt-4o", input="hi", stream=stream)
    llm.reply(status=429, error="slow down")
    with pytest.raises(openai.RateLimitError):
        messages = [{"role": "user", "content": "hi"}]
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o", messages=messages, stream=stream
        )

    wrong = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="hw-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.responses.create(model="gpt-4o", input="hi", stream=stream)
    wrong.close()
