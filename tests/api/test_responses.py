"""The Responses API through the official openai client: create, retrieve, chains, input items, delete."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseItemList

from tests.support.responses_api import WEATHER
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import wait_until


def test_create_and_retrieve_a_stored_response(gateway, llm: ScriptedLLM) -> None:
    llm.reply("Olá!", prompt_tokens=12, completion_tokens=3)
    client = gateway.client()

    created = client.responses.create(
        model="gpt-4o",
        instructions="Be brief.",
        input="Oi",
        temperature=0.3,
        top_p=0.9,
        max_output_tokens=50,
        metadata={"ticket": "T-1"},
        user="end-user-7",
    )

    assert created.id.startswith("resp_") and created.object == "response"
    assert created.status == "completed" and created.completed_at is not None
    assert created.output_text == "Olá!"
    message = created.output[0]
    assert message.type == "message" and message.id.startswith("msg_") and message.role == "assistant"
    assert (created.usage.input_tokens, created.usage.output_tokens, created.usage.total_tokens) == (
        12,
        3,
        15,
    )
    assert created.instructions == "Be brief." and created.metadata == {"ticket": "T-1"}
    assert created.store is True and created.background is False and created.model == "gpt-4o"
    sent = llm.requests[0]
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Oi"}]
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["user"]) == (
        50,
        0.3,
        0.9,
        "end-user-7",
    )

    fetched = client.responses.retrieve(created.id)
    assert fetched.model_dump() == created.model_dump()
    raw = httpx.get(
        f"{gateway.url}/v1/responses/{created.id}", headers={"authorization": f"Bearer {gateway.key}"}
    )
    Response.model_validate(raw.json())  # every field validates against the SDK's own type


def test_function_tool_round_trip_through_previous_response_id(gateway, llm: ScriptedLLM) -> None:
    llm.reply(
        tool_calls=[
            ("get_weather", {"city": "Lisboa"}, "call_a"),
            ("get_weather", {"city": "Porto"}, "call_b"),
        ]
    )
    llm.reply("Lisboa 20°C, Porto 17°C")
    client = gateway.client()

    first = client.responses.create(
        model="gpt-4o", instructions="Use tools.", input="weather?", tools=[WEATHER], tool_choice="auto"
    )

    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "get_weather", {"city": "Lisboa"}),
        ("call_b", "get_weather", {"city": "Porto"}),
    ]
    assert all(c.id.startswith("fc_") and c.status == "completed" for c in calls)
    assert llm.requests[0]["tools"][0]["function"]["strict"] is True
    assert llm.requests[0]["tool_choice"] == "auto"

    second = client.responses.create(
        model="gpt-4o",
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": "call_a", "output": "20°C"},
            {"type": "function_call_output", "call_id": "call_b", "output": "17°C"},
        ],
        tools=[WEATHER],
    )

    assert second.output_text == "Lisboa 20°C, Porto 17°C"
    assert second.previous_response_id == first.id
    replayed = llm.requests[1]["messages"]
    # instructions are not inherited; the chain is previous input → previous output → new input
    assert replayed[0] == {"role": "user", "content": "weather?"}
    assert [c["id"] for c in replayed[1]["tool_calls"]] == ["call_a", "call_b"]
    assert replayed[2:] == [
        {"role": "tool", "tool_call_id": "call_a", "content": "20°C"},
        {"role": "tool", "tool_call_id": "call_b", "content": "17°C"},
    ]


def test_wrong_or_missing_call_id_is_a_400_naming_it(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "Faro"}, "call_ok")])
    client = gateway.client()
    first = client.responses.create(model="gpt-4o", input="Faro?", tools=[WEATHER])

    with pytest.raises(openai.BadRequestError) as wrong:
        client.responses.create(
            model="gpt-4o",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        )
    assert "call_nope" in wrong.value.body["message"] and wrong.value.body["param"] == "input"

    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="gpt-4o", previous_response_id=first.id, input="and now?")
    assert "call_ok" in missing.value.body["message"]
    assert len(llm.requests) == 1  # neither reached the model


def test_previous_response_of_another_org_or_unknown_is_404(gateway, llm: ScriptedLLM) -> None:
    llm.reply("mine")
    first = gateway.client().responses.create(model="gpt-4o", input="hi")
    other = gateway.client(gateway.new_org().key)

    for client, response_id in ((other, first.id), (gateway.client(), "resp_unknown")):
        with pytest.raises(openai.NotFoundError) as info:
            client.responses.create(model="gpt-4o", previous_response_id=response_id, input="next")
        assert info.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(first.id)


def test_store_false_with_previous_response_id_is_refused_and_not_retrievable(
    gateway, llm: ScriptedLLM
) -> None:
    llm.reply("first")
    llm.reply("ephemeral")
    client = gateway.client()
    first = client.responses.create(model="gpt-4o", input="hi")

    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="gpt-4o", input="x", previous_response_id=first.id, store=False)
    assert info.value.body["param"] == "previous_response_id"

    ephemeral = client.responses.create(model="gpt-4o", input="x", store=False)
    assert ephemeral.output_text == "ephemeral" and ephemeral.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(ephemeral.id)


def test_input_items_pages_and_orders(gateway, llm: ScriptedLLM) -> None:
    llm.reply("ok")
    client = gateway.client()
    inputs = [
        {"role": "user", "content": "one"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "two"}]},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://example.test/cat.png"}]},
    ]
    created = client.responses.create(model="gpt-4o", input=inputs)

    newest_first = client.responses.input_items.list(created.id, limit=2)
    assert newest_first.has_more is True and len(newest_first.data) == 2
    assert newest_first.data[0].content[0].type == "input_image"
    everything = client.responses.input_items.list(created.id, order="asc")
    texts = [getattr(i.content[0], "text", None) for i in everything.data]
    assert texts == ["one", "two", "three", None]
    after = client.responses.input_items.list(created.id, order="asc", after=everything.data[1].id)
    assert [i.id for i in after.data] == [i.id for i in everything.data[2:]]
    raw = httpx.get(
        f"{gateway.url}/v1/responses/{created.id}/input_items?order=asc",
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    listing = ResponseItemList.model_validate(raw.json())
    assert listing.first_id == everything.data[0].id and listing.last_id == everything.data[-1].id
    sent = llm.requests[0]["messages"]
    assert sent[2] == {"role": "assistant", "content": "three"}
    assert sent[3]["content"][0]["type"] == "image_url"


def test_delete_removes_the_response(gateway, llm: ScriptedLLM) -> None:
    llm.reply("bye")
    client = gateway.client()
    created = client.responses.create(model="gpt-4o", input="x")

    client.responses.delete(created.id)

    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"model": "gpt-4o", "input": [{"type": "message", "role": "robot", "content": "x"}]},
            "input[0].role",
        ),
        ({"model": "gpt-4o", "input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        ({"model": "gpt-4o", "input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"model": "gpt-4o", "input": "x", "max_tool_calls": 0}, "max_tool_calls"),
        ({"model": "gpt-4o", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "gpt-4o", "input": "x", "frequency": 1}, "frequency"),
        ({"model": "gpt-4o", "input": "x", "background": True, "store": False}, "background"),
        ({"model": "gpt-4o", "input": [{"type": "reasoning"}]}, "input[0].type"),
    ],
)
def test_bad_input_is_a_400_with_the_field_path(gateway, body, param) -> None:
    raw = httpx.post(
        f"{gateway.url}/v1/responses", json=body, headers={"authorization": f"Bearer {gateway.key}"}
    )
    assert raw.status_code == 400, raw.text
    assert raw.json()["error"]["param"] == param


def test_upstream_failure_is_an_http_error_and_a_failed_stored_response(gateway, llm: ScriptedLLM) -> None:
    llm.reply(status=503, error="overloaded")
    client = gateway.client()

    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="gpt-4o", input="x")

    logs = wait_until(lambda: client.get("/logs", cast_to=object)["data"], message="the log record")
    record = logs[0]
    assert record["route"] == "responses" and record["status"] == "error"
    failed = client.responses.retrieve(record["response_id"])
    assert failed.status == "failed" and failed.error.code == "server_error"


def test_tool_choice_and_parallel_tool_calls_reach_the_upstream(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "Évora"}, "call_e")])
    llm.reply("fine")
    client = gateway.client()

    forced = client.responses.create(
        model="gpt-4o",
        input="x",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        max_tool_calls=3,
    )
    client.responses.create(model="gpt-4o", input="y", tools=[WEATHER], tool_choice="required")

    assert llm.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert llm.requests[0]["parallel_tool_calls"] is False
    assert llm.requests[1]["tool_choice"] == "required"
    assert forced.tool_choice.type == "function" and forced.tool_choice.name == "get_weather"
    assert forced.parallel_tool_calls is False and forced.max_tool_calls == 3
    assert forced.tools[0].name == "get_weather" and forced.tools[0].strict is True
