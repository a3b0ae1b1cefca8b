"""Chat Completions through the official openai client against a scripted upstream."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.scripted_llm import ScriptedLLM


def test_chat_completion_round_trip(gateway, llm: ScriptedLLM) -> None:
    llm.reply("Olá! Tudo certo.", prompt_tokens=21, completion_tokens=5)
    client = gateway.client()

    completion = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Oi"}],
        temperature=0.2,
    )

    assert completion.choices[0].message.content == "Olá! Tudo certo."
    assert completion.choices[0].finish_reason == "stop"
    assert (
        completion.usage.prompt_tokens,
        completion.usage.completion_tokens,
        completion.usage.total_tokens,
    ) == (21, 5, 26)
    sent = llm.requests[0]
    assert sent["model"] == "gpt-4o-2024"  # public name mapped to the provider's model
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Oi"}]
    assert sent["temperature"] == 0.2
    assert "authorization" not in {k for k in llm.headers[0] if llm.headers[0][k].startswith("Bearer hw-")}


def test_streamed_chat_yields_chunks_and_usage(gateway, llm: ScriptedLLM) -> None:
    llm.reply("streaming works fine", chunk_size=3, prompt_tokens=8, completion_tokens=4)
    client = gateway.client()

    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streaming works fine"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3
    assert len({c.id for c in chunks}) == 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 12


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def test_client_tool_calls_pass_through_intact(gateway, llm: ScriptedLLM) -> None:
    llm.reply(
        tool_calls=[
            ("get_weather", {"city": "Lisboa"}, "call_abc"),
            ("get_weather", {"city": "Porto"}, "call_def"),
        ]
    )
    llm.reply("Lisboa 20°C, Porto 17°C")
    client = gateway.client()
    messages = [{"role": "user", "content": "weather in Lisboa and Porto?"}]

    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS, tool_choice="auto")

    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("call_abc", "get_weather", {"city": "Lisboa"}),
        ("call_def", "get_weather", {"city": "Porto"}),
    ]
    assert llm.requests[0]["tools"] == [{**TOOLS[0], "function": {**TOOLS[0]["function"]}}]
    assert llm.requests[0]["tool_choice"] == "auto"

    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": "call_abc", "content": "20°C"})
    messages.append({"role": "tool", "tool_call_id": "call_def", "content": "17°C"})
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)

    assert second.choices[0].message.content == "Lisboa 20°C, Porto 17°C"
    upstream_messages = llm.requests[1]["messages"]
    assert upstream_messages[1]["role"] == "assistant"
    assert [c["id"] for c in upstream_messages[1]["tool_calls"]] == ["call_abc", "call_def"]
    assert upstream_messages[2:] == [
        {"role": "tool", "tool_call_id": "call_abc", "content": "20°C"},
        {"role": "tool", "tool_call_id": "call_def", "content": "17°C"},
    ]


def test_streamed_tool_calls_pass_through(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "Faro"}, "call_x1")])
    client = gateway.client()

    chunks = list(
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Faro?"}], tools=TOOLS, stream=True
        )
    )

    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id == "call_x1" and deltas[0].function.name == "get_weather"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Faro"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_provider_slash_model_form_and_models_list(gateway, llm: ScriptedLLM) -> None:
    llm.reply("direct")
    client = gateway.client()

    out = client.chat.completions.create(
        model="upstream/some-raw-model", messages=[{"role": "user", "content": "x"}]
    )

    assert out.choices[0].message.content == "direct"
    assert llm.requests[0]["model"] == "some-raw-model"
    assert [m.id for m in client.models.list()] == ["gpt-4o"]


def test_unknown_model_is_404_in_openai_shape(gateway) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        gateway.client().chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 404
    assert info.value.body["code"] == "model_not_found"
    assert info.value.body["param"] == "model"


@pytest.mark.parametrize("key", [None, "hw-wrong"])
def test_missing_or_wrong_key_is_401(gateway, key: str | None) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions", json={"model": "gpt-4o", "messages": []}, headers=headers
    )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{gateway.url}/v1/models", headers=headers).status_code == 401


def _post(gateway, body: object, raw: bytes | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {gateway.key}", "content-type": "application/json"}
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{gateway.url}/v1/chat/completions", content=content, headers=headers)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "gpt-4o", "messages": "hello"}, "messages"),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"model": "gpt-4o", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {
                "model": "gpt-4o",
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "function"}],
            },
            "tools[0].function",
        ),
        ({"model": "gpt-4o", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ],
)
def test_malformed_body_is_400_with_field_path(gateway, body: object, param: str) -> None:
    response = _post(gateway, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert param in error["message"]


def test_invalid_json_is_400(gateway) -> None:
    response = _post(gateway, None, raw=b'{"model": "gpt-4o", "messages": [')
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]["message"]
