"""``POST /v1/messages`` with the official ``anthropic`` SDK as the caller: plain, streamed, a
client tool round trip, an ``agent:`` model running its MCP loop through a confirmation, the
Hatchway key as ``x-api-key`` (a wrong one is the SDK's ``AuthenticationError``), and
``count_tokens``. The upstream is the OpenAI-shaped scripted model: any provider would do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anthropic
import httpx
import pytest

from tests.support.agent_loop import log_of, rule_for
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import ScriptedLLM

HI = [{"role": "user", "content": "Olá"}]
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(gateway: RunningGateway, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key or gateway.key, max_retries=0, timeout=30)


def test_a_plain_message_with_its_usage_and_run_record(gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory()
    llm.reply("Olá! Tudo bem?", prompt_tokens=21, completion_tokens=6)
    raw = client(gateway).messages.with_raw_response.create(
        model="gpt-4o", max_tokens=100, system="Seja breve.", messages=HI, extra_body={"temperature": 0.3}
    )
    message = raw.parse()

    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "Olá! Tudo bem?"
    assert message.stop_reason == "end_turn" and message.role == "assistant" and message.model == "gpt-4o"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 6)
    sent = llm.requests[0]
    assert sent["messages"] == [
        {"role": "system", "content": "Seja breve."},
        {"role": "user", "content": "Olá"},
    ]
    assert (sent["max_tokens"], sent["temperature"]) == (100, 0.3)
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert (
        record["route"] == "messages"
        and record["http_status"] == 200
        and record["usage"]["total_tokens"] == 27
    )


def test_a_streamed_message(gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory()
    llm.reply("em pedaços pequenos", chunk_size=3, prompt_tokens=9, completion_tokens=4)
    with client(gateway).messages.stream(model="gpt-4o", max_tokens=50, messages=HI) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()

    assert "".join(pieces) == "em pedaços pequenos" and len(pieces) >= 3
    assert final.content[0].text == "em pedaços pequenos" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 4
    assert llm.requests[0]["stream"] is True


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_client_tool_round_trip(stream: bool, gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory()
    llm.reply(tool_calls=[("get_weather", {"city": "Porto"}, "call_porto")])
    sdk = client(gateway)
    if stream:
        with sdk.messages.stream(model="gpt-4o", max_tokens=50, messages=HI, tools=[WEATHER]) as events:
            first = events.get_final_message()
    else:
        first = sdk.messages.create(model="gpt-4o", max_tokens=50, messages=HI, tools=[WEATHER])
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert (use.id, use.name, use.input, first.stop_reason) == (
        "call_porto",
        "get_weather",
        {"city": "Porto"},
        "tool_use",
    )
    assert llm.requests[0]["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]

    llm.reply("Sol no Porto.")
    history = [
        *HI,
        {"role": "assistant", "content": [use.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 24 C"}],
        },
    ]
    answer = sdk.messages.create(model="gpt-4o", max_tokens=50, messages=history, tools=[WEATHER])
    assert answer.content[0].text == "Sol no Porto."
    tool_message = [m for m in llm.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_message == [{"role": "tool", "tool_call_id": "call_porto", "content": "sunny, 24 C"}]


def test_an_agent_runs_its_mcp_loop_and_asks_for_a_confirmation(
    agent_gateway: RunningGateway, contas: RunningContas
) -> None:
    sdk = client(agent_gateway)
    headers = {"X-On-Behalf-Of": "ana", "hatchway-session": "claude-1"}
    asked = sdk.messages.create(
        model="agent:contas",
        max_tokens=200,
        messages=[{"role": "user", "content": ASK}],
        extra_headers=headers,
    )
    assert asked.content[0].text == QUESTION and contas.backend.stats()["total_executions"] == 0

    conversation = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": QUESTION},
        {"role": "user", "content": "sim"},
    ]
    done = sdk.messages.create(
        model="agent:contas", max_tokens=200, messages=conversation, extra_headers=headers
    )
    assert done.content[0].text == ANSWER
    assert sum(contas.backend.executions.values()) == 1


def test_an_agent_model_with_two_mcp_rounds_streams_its_answer(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    search = mcp_server_factory("search")
    plugin = {"mcp_servers": [{"id": "search", "url": search.url, "tools": ["echo"]}]}
    gateway = gateway_factory(**rule_for(tmp_path, plugin))
    llm.reply(tool_calls=[("search__echo", {"text": "um"})]).reply(
        tool_calls=[("search__echo", {"text": "dois"})]
    ).reply("Achei: echo:um, echo:dois")
    with client(gateway).messages.stream(model="gpt-4o", max_tokens=50, messages=HI) as stream:
        text = "".join(stream.text_stream)
    assert text == "Achei: echo:um, echo:dois" and search.tool_calls("echo") == 2


def test_the_key_as_x_api_key_or_bearer_and_a_wrong_one_in_anthropics_shape(
    gateway_factory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory()
    with pytest.raises(anthropic.AuthenticationError) as refused:
        client(gateway, key="sk-wrong").messages.create(model="gpt-4o", max_tokens=10, messages=HI)
    assert refused.value.status_code == 401
    assert (
        refused.value.body["type"] == "error"
        and refused.value.body["error"]["type"] == "authentication_error"
    )
    llm.reply("ok")
    bearer = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "gpt-4o", "max_tokens": 10, "messages": HI},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert bearer.status_code == 200 and bearer.json()["content"][0]["text"] == "ok"
    bad = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "gpt-4o", "messages": [{"role": "robot", "content": "x"}]},
        headers={"x-api-key": gateway.key},
    )
    assert bad.status_code == 400
    assert bad.json()["error"] == {"type": "invalid_request_error", "message": bad.json()["error"]["message"]}
    assert "messages[0].role" in bad.json()["error"]["message"]


def test_count_tokens(gateway_factory) -> None:
    gateway = gateway_factory()
    counted = client(gateway).messages.count_tokens(model="gpt-4o", messages=HI, system="x" * 400)
    assert counted.input_tokens >= 100  # the request's bytes over four: an estimate


def test_an_upstream_429_is_the_sdks_rate_limit_error(gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory()
    llm.reply(status=429, error="slow down")
    with pytest.raises(anthropic.RateLimitError) as refused:
        client(gateway).messages.create(model="gpt-4o", max_tokens=10, messages=HI)
    assert refused.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"model": "gpt-4o", "messages": []}, "messages"),
        ({"model": "gpt-4o", "messages": ["hi"]}, "messages[0].role"),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"text": "no type"}]}]},
            "messages[0].content[0]",
        ),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].source.type",
        ),
        (
            {
                "model": "gpt-4o",
                "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": 1}]}],
            },
            "messages[0].content[0]",
        ),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        ({"model": "gpt-4o", "max_tokens": 0, "messages": HI}, "max_tokens"),
        ({"model": "nope", "max_tokens": 5, "messages": HI}, "nope"),
    ],
)
def test_a_bad_request_is_a_4xx_naming_the_field(body: dict, where: str, gateway_factory) -> None:
    gateway = gateway_factory()
    answer = httpx.post(f"{gateway.url}/v1/messages", json=body, headers={"x-api-key": gateway.key})
    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] in ("invalid_request_error", "not_found_error")
    assert where in error["error"]["message"]
