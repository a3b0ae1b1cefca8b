"""Anthropic Messages and Gemini upstreams (``providers[].type``), end to end: the official openai
client → Hatchway → a scripted Anthropic- or Gemini-shaped upstream on loopback, plain, streamed,
with a client tool round trip, and an ``agent`` model running two MCP rounds."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_loop import USER, log_of, write_plugin
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass(frozen=True)
class Vendor:
    type: str
    path: str
    """The base URL's path on the scripted upstream."""
    key_header: str
    upstream_model: str

    def config(self, llm: ScriptedLLM) -> dict[str, Any]:
        provider = {"id": self.type, "type": self.type, "base_url": f"{llm.server.url}{self.path}"}
        return {
            "providers": [provider | {"api_key": f"{self.type}-test-key", "timeout_seconds": 5}],
            "models": [{"name": "model", "provider": self.type, "upstream_model": self.upstream_model}],
        }

    def assistant_turns(self, body: dict[str, Any]) -> int:
        if self.type == "anthropic":
            return sum(1 for m in body["messages"] if m["role"] == "assistant")
        return sum(1 for c in body["contents"] if c["role"] == "model")

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(call id, output) of every tool result the upstream received."""
        if self.type == "anthropic":
            blocks = [b for m in body["messages"] if m["role"] == "user" for b in m["content"]]
            return [(b["tool_use_id"], b["content"]) for b in blocks if b.get("type") == "tool_result"]
        parts = [p for c in body["contents"] for p in c["parts"] if "functionResponse" in p]
        return [(p["functionResponse"]["id"], p["functionResponse"]["response"]["result"]) for p in parts]


ANTHROPIC = Vendor("anthropic", "/v1", "x-api-key", "claude-sonnet-4-5")
GEMINI = Vendor("gemini", "/v1beta", "x-goog-api-key", "gemini-2.5-flash")


@pytest.fixture(params=[ANTHROPIC, GEMINI], ids=lambda v: v.type)
def vendor(request: pytest.FixtureRequest) -> Vendor:
    return request.param


def test_a_plain_completion_with_its_usage(vendor: Vendor, gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(**vendor.config(llm))
    llm.reply("Olá!", prompt_tokens=30, completion_tokens=5, cached_tokens=12)
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    completion = gateway.client().chat.completions.create(
        model="model", messages=messages, temperature=0.2, max_tokens=64
    )

    assert completion.choices[0].message.content == "Olá!"
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (42, 5)  # cached tokens are prompt tokens too
    assert usage.prompt_tokens_details.cached_tokens == 12
    sent, headers = llm.requests[0], llm.headers[0]
    assert headers[vendor.key_header] == f"{vendor.type}-test-key" and "authorization" not in headers
    if vendor is ANTHROPIC:
        assert llm.paths[0] == "/v1/messages" and headers["anthropic-version"] == "2023-06-01"
        assert sent["system"] == [{"type": "text", "text": "Be brief."}]
        assert (sent["model"], sent["max_tokens"], sent["temperature"]) == ("claude-sonnet-4-5", 64, 0.2)
        assert sent["messages"][0]["role"] == "user"
    else:
        assert llm.paths[0] == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
        assert sent["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64}
        assert sent["contents"][0]["role"] == "user"


def test_a_streamed_completion(vendor: Vendor, gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(**vendor.config(llm))
    llm.reply("streamed in pieces", chunk_size=3, prompt_tokens=9, completion_tokens=4)
    stream = gateway.client().chat.completions.create(
        model="model", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed in pieces"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 3  # not one piece
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (9, 4)
    expected = (
        "/v1/messages" if vendor is ANTHROPIC else "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    )
    assert llm.paths[0] == expected


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_client_tool_round_trip(vendor: Vendor, stream: bool, gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(**vendor.config(llm))
    llm.reply(tool_calls=[("get_weather", {"city": "Porto"}, "call_porto")], chunk_size=5)
    client = gateway.client()
    if stream:
        chunks = list(
            client.chat.completions.create(model="model", messages=USER, tools=[WEATHER], stream=True)
        )
        deltas = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
        assert deltas[0].id == "call_porto" and deltas[0].function.name == "get_weather"
        arguments = "".join(t.function.arguments or "" for t in deltas)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        call_id, name = deltas[0].id, deltas[0].function.name
    else:
        message = client.chat.completions.create(model="model", messages=USER, tools=[WEATHER]).choices[0]
        finish = [message.finish_reason]
        call = message.message.tool_calls[0]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert (call_id, name, json.loads(arguments), finish) == (
        "call_porto",
        "get_weather",
        {"city": "Porto"},
        ["tool_calls"],
    )
    if vendor is ANTHROPIC:
        tool = llm.requests[0]["tools"][0]
        assert tool["name"] == "get_weather" and tool["input_schema"] == WEATHER["function"]["parameters"]
    else:
        declared = llm.requests[0]["tools"][0]["functionDeclarations"][0]
        assert declared["parametersJsonSchema"] == WEATHER["function"]["parameters"]

    llm.reply("Sunny in Porto.")
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "sunny, 24 C"},
    ]
    answer = client.chat.completions.create(model="model", messages=history, tools=[WEATHER])
    assert answer.choices[0].message.content == "Sunny in Porto."
    assert vendor.tool_results(llm.requests[1]) == [("call_porto", "sunny, 24 C")]
    if vendor is GEMINI:  # a function's answer is named after the call it answers
        parts = [p for c in llm.requests[1]["contents"] for p in c["parts"] if "functionResponse" in p]
        assert parts[0]["functionResponse"]["name"] == "get_weather"


def test_an_agent_model_runs_two_mcp_rounds(
    vendor: Vendor,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    search = mcp_server_factory("search")
    plugin = write_plugin(
        tmp_path, "search", {"mcp_servers": [{"id": "search", "url": search.url, "tools": ["echo"]}]}
    )
    agent = {"name": "finder", "model": "model", "instructions": "Find.", "plugin": plugin}
    gateway = gateway_factory(**vendor.config(llm), allow_private_mcp_urls=True, agents=[agent])
    replies = [
        Reply(tool_calls=[("search__echo", {"text": "um"})], prompt_tokens=10, completion_tokens=3),
        Reply(tool_calls=[("search__echo", {"text": "dois"})], prompt_tokens=20, completion_tokens=4),
    ]

    def handler(body: dict[str, Any]) -> Reply:
        turn = vendor.assistant_turns(body)
        if turn < len(replies):
            return replies[turn]
        outputs = [output for _, output in vendor.tool_results(body)]
        return Reply(text="Found: " + ", ".join(outputs), prompt_tokens=30, completion_tokens=5)

    llm.handler = handler
    raw = gateway.client().chat.completions.with_raw_response.create(model="agent:finder", messages=USER)
    completion = raw.parse()

    assert completion.choices[0].message.content == "Found: echo:um, echo:dois"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (60, 12)
    assert search.tool_calls("echo") == 2 and len(llm.requests) == 3
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert record["rounds"] == 3 and record["usage"]["total_tokens"] == 72
    calls = [s for s in record["steps"] if s["type"] == "tool_call"]
    assert [json.loads(s["arguments"]) for s in calls] == [{"text": "um"}, {"text": "dois"}]


def test_an_upstream_error_keeps_its_status_and_never_shows_the_key(
    vendor: Vendor, gateway_factory, llm: ScriptedLLM
) -> None:
    import openai

    gateway = gateway_factory(**vendor.config(llm))
    llm.reply(status=429, error=f"slow down ({vendor.type}-test-key)")
    with pytest.raises(openai.RateLimitError) as refused:
        gateway.client(max_retries=0).chat.completions.create(model="model", messages=USER)
    assert "slow down" in str(refused.value) and f"{vendor.type}-test-key" not in str(refused.value)
