"""``/v1/messages`` carries every ``tool_result`` block (issue 41), through the official ``anthropic``
SDK to the scripted upstreams of each kind:

- an image inside a ``tool_result`` (Claude Code's ``Read`` of a PNG): a native Anthropic upstream
  gets the block as it came; an OpenAI-shaped one the tool message's text and the image in a user
  message right after the tool messages; Gemini an ``inlineData`` part beside the answer;
- ``is_error``: kept for Anthropic, ``{"error": …}`` for Gemini, an ``[error]`` prefix for chat;
- ``cache_control`` on a ``tool_result``: kept for Anthropic (the chat shape has no place for it);
- ``stop_reason: "stop_sequence"`` from a native Anthropic upstream reaches the client with its
  ``stop_sequence``, plain and streamed.
"""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import pytest

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32).decode()
UPSTREAMS = {
    # provider type: (base path, upstream model)
    "openai": ("/v1", "gpt-4o"),
    "anthropic": ("/v1", "claude-sonnet-4-5"),
    "gemini": ("/v1beta", "gemini-2.5-flash"),
}


def _gateway(gateway_factory: Any, llm: ScriptedLLM, kind: str) -> RunningGateway:
    path, upstream_model = UPSTREAMS[kind]
    provider = {"id": "up", "type": kind, "base_url": f"{llm.server.url}{path}", "api_key": "k"}
    return gateway_factory(
        providers=[provider], models=[{"name": "claude", "provider": "up", "upstream_model": upstream_model}]
    )


def _client(gateway: RunningGateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30)


READ = [
    {"role": "user", "content": "What is in shot.png?"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "shot.png"}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "text", "text": "<system-reminder>read it</system-reminder>"},
                ],
                "is_error": False,
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "text", "text": "Describe it."},
        ],
    },
]
REFUSED = [
    {"role": "user", "content": "Delete it."},
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "rm x"}}],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "The user refused.",
                "is_error": True,
            }
        ],
    },
]
TOOLS = [
    {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}},
    {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object", "properties": {}}},
]


def _send(gateway: RunningGateway, messages: list[dict[str, Any]]) -> None:
    answer = _client(gateway).messages.create(model="claude", max_tokens=64, messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    assert answer.content[0].type == "text"


def test_a_native_anthropic_upstream_gets_the_tool_result_as_it_came(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    gateway = _gateway(gateway_factory, llm, "anthropic")
    llm.default = Reply(text="A PNG.")
    _send(gateway, READ)
    _send(gateway, REFUSED)

    [read] = [b for m in llm.requests[0]["messages"] for b in m["content"] if b.get("type") == "tool_result"]
    assert read["content"][0] == READ[2]["content"][0]["content"][0]  # the image block, as it came
    assert read["content"][1]["text"] == "<system-reminder>read it</system-reminder>"
    assert read["cache_control"] == {"type": "ephemeral"} and "is_error" not in read
    [refused] = [
        b for m in llm.requests[1]["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert refused["is_error"] is True and refused["content"] == "The user refused."


def test_an_openai_shaped_upstream_gets_the_image_after_the_tool_message(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    gateway = _gateway(gateway_factory, llm, "openai")
    llm.default = Reply(text="A PNG.")
    _send(gateway, READ)
    _send(gateway, REFUSED)

    sent = llm.requests[0]["messages"]
    tool = next(i for i, m in enumerate(sent) if m["role"] == "tool")
    assert sent[tool]["content"].startswith("<system-reminder>read it</system-reminder>")
    assert "1 image(s)" in sent[tool]["content"]  # never an empty output in the image's place
    after = sent[tool + 1]
    assert after["role"] == "user"
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}} in after["content"]
    refused = next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")
    assert refused["content"] == "[error] The user refused."


def test_a_gemini_upstream_gets_the_image_beside_the_answer(gateway_factory: Any, llm: ScriptedLLM) -> None:
    gateway = _gateway(gateway_factory, llm, "gemini")
    llm.default = Reply(text="A PNG.")
    _send(gateway, READ)
    _send(gateway, REFUSED)

    parts = [p for c in llm.requests[0]["contents"] for p in c["parts"]]
    answer = next(i for i, p in enumerate(parts) if "functionResponse" in p)
    assert parts[answer + 1] == {"inlineData": {"mimeType": "image/png", "data": PNG}}
    refused = next(p for c in llm.requests[1]["contents"] for p in c["parts"] if "functionResponse" in p)
    assert refused["functionResponse"]["response"] == {"error": "The user refused."}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_stop_sequence_reaches_the_client(gateway_factory: Any, llm: ScriptedLLM, stream: bool) -> None:
    gateway = _gateway(gateway_factory, llm, "anthropic")
    llm.reply("one, two", stop_sequence="three")
    kwargs: dict[str, Any] = {"model": "claude", "max_tokens": 64, "stop_sequences": ["three"]}
    if stream:
        with _client(gateway).messages.stream(
            messages=[{"role": "user", "content": "count"}], **kwargs
        ) as events:
            message = events.get_final_message()
    else:
        message = _client(gateway).messages.create(messages=[{"role": "user", "content": "count"}], **kwargs)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "three")
    assert llm.requests[0]["stop_sequences"] == ["three"]


SEARCHED = [
    {"role": "user", "content": "What is the weather?"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_3", "name": "ToolSearch", "input": {"query": "weather"}}
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_3",
                "content": [{"type": "tool_reference", "tool_name": "Weather"}],
            }
        ],
    },
]
DEFERRING = [
    {
        "name": "ToolSearch",
        "description": "Find tools.",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "Weather",
        "description": "The weather.",
        "input_schema": {"type": "object", "properties": {}},
        "defer_loading": True,
    },
]


def _offered(body: dict[str, Any]) -> dict[str, Any]:
    """The tools an upstream was sent, by name: the tool as sent."""
    tools = body.get("tools") or []
    if "contents" in body:  # Gemini: one tool of function declarations
        return {d["name"]: d for t in tools for d in t["functionDeclarations"]}
    return {t.get("name") or t["function"]["name"]: t for t in tools}


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini"])
def test_a_deferred_tool_reaches_each_upstream_in_the_form_it_takes(
    gateway_factory: Any, llm: ScriptedLLM, kind: str
) -> None:
    """Claude Code sends tools with ``defer_loading: true`` behind its ``ToolSearch``: a native
    Anthropic upstream gets the flag as it came; an upstream with no deferred loading is offered such
    a tool once a ``tool_reference`` in the conversation has loaded it, as Anthropic's API does."""
    gateway = _gateway(gateway_factory, llm, kind)
    llm.default = Reply(text="Sunny.")
    client = _client(gateway)
    for messages in (SEARCHED[:1], SEARCHED):
        client.messages.create(model="claude", max_tokens=64, messages=messages, tools=DEFERRING)  # type: ignore[arg-type]

    before, after = (_offered(body) for body in llm.requests)
    if kind == "anthropic":
        assert before["Weather"]["defer_loading"] is True and after["Weather"]["defer_loading"] is True
        assert "defer_loading" not in before["ToolSearch"]
    else:
        assert set(before) == {"ToolSearch"}
        assert set(after) == {"ToolSearch", "Weather"}
