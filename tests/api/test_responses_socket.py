"""WebSocket mode of ``/v1/responses``, driven by the official client's ``responses.connect()``."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.responses import ResponsesServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.support.responses_api import WEATHER
from tests.support.scripted_llm import ScriptedLLM

SERVER_EVENTS = TypeAdapter(ResponsesServerEvent)
TERMINAL = ("response.completed", "response.failed", "response.incomplete")


def turn(conn: Any) -> list[dict[str, Any]]:
    """The raw events of one turn, each validated as the SDK's server event, up to its terminal one."""
    events = []
    while True:
        event = json.loads(conn.recv_bytes())
        SERVER_EVENTS.validate_python(event)
        events.append(event)
        if event["type"] in TERMINAL or (event["type"] == "error" and "sequence_number" not in event):
            return events


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_sequential_turns_on_one_socket_continue_a_store_false_response(gateway, llm: ScriptedLLM) -> None:
    llm.reply("Noted: papaya.", chunk_size=5)
    llm.reply("The code word is papaya.")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="Remember the code word papaya.", store=False)
        first = turn(conn)
        first_id = first[-1]["response"]["id"]
        conn.response.create(
            model="gpt-4o", input="What was the code word?", store=False, previous_response_id=first_id
        )
        second = turn(conn)

    for events in (first, second):
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
        assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    assert "".join(e["delta"] for e in first if e["type"] == "response.output_text.delta") == "Noted: papaya."
    final = second[-1]["response"]
    assert final["store"] is False and final["previous_response_id"] == first_id
    assert final["output"][0]["content"][0]["text"] == "The code word is papaya."
    # The second model call saw the first turn, although nothing was stored.
    history = llm.requests[1]["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["content"] == "Noted: papaya."
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first_id)


def test_an_unknown_previous_response_is_an_error_event_and_the_socket_stays_usable(
    gateway, llm: ScriptedLLM
) -> None:
    llm.reply("still here")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="x", store=False, previous_response_id="resp_nowhere")
        [refused] = turn(conn)
        conn.response.create(model="gpt-4o", input="and now?", store=False)
        after = turn(conn)

    assert refused["type"] == "error" and refused["status"] == 400
    assert refused["error"]["code"] == "previous_response_not_found"
    assert refused["error"]["param"] == "previous_response_id"
    assert after[-1]["type"] == "response.completed"
    assert len(llm.requests) == 1  # the refused turn never reached the model


def test_stored_responses_chain_across_sockets_and_http(gateway, llm: ScriptedLLM) -> None:
    llm.reply("first answer")
    llm.reply("second answer")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="one")
        first_id = turn(conn)[-1]["response"]["id"]
    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="two", previous_response_id=first_id)
        second = turn(conn)[-1]["response"]

    assert client.responses.retrieve(second["id"]).output_text == "second answer"
    assert user_texts(llm.requests[1]) == ["one", "two"]


def test_a_client_function_call_streams_its_arguments_and_continues_on_the_socket(
    gateway, llm: ScriptedLLM
) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "San Francisco"}, "call_w")])
    llm.reply("It is 64 degrees.")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="weather?", tools=[WEATHER], store=False)
        first = turn(conn)
        call = next(e["item"] for e in first if e["type"] == "response.output_item.done")
        conn.response.create(
            model="gpt-4o",
            store=False,
            previous_response_id=first[-1]["response"]["id"],
            input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "64F and clear"}],
        )
        second = turn(conn)

    types = [e["type"] for e in first]
    assert (
        "response.function_call_arguments.delta" in types and "response.function_call_arguments.done" in types
    )
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert second[-1]["response"]["output"][0]["content"][0]["text"] == "It is 64 degrees."
    assert any(
        m.get("role") == "tool" and m["content"] == "64F and clear" for m in llm.requests[1]["messages"]
    )


def test_a_failed_turn_ends_with_response_failed_carrying_the_error(gateway, llm: ScriptedLLM) -> None:
    llm.reply(status=500, error="upstream exploded")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="x", store=False)
        events = turn(conn)

    # On a socket an error event ends the turn, so the failure is told once, by response.failed.
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.failed"]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert "upstream exploded" in events[-1]["response"]["error"]["message"]


def test_a_failed_continuation_evicts_the_response_it_continued(gateway, llm: ScriptedLLM) -> None:
    llm.reply("OK")
    client = gateway.client()

    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="Remember ember.", store=False)
        first_id = turn(conn)[-1]["response"]["id"]
        wrong = [{"type": "function_call_output", "call_id": "call_missing", "output": "nothing"}]
        conn.response.create(model="gpt-4o", store=False, previous_response_id=first_id, input=wrong)
        [failed] = turn(conn)
        conn.response.create(model="gpt-4o", store=False, previous_response_id=first_id, input="stale?")
        [evicted] = turn(conn)

    assert failed["error"]["code"] == "invalid_call_id" and failed["status"] == 400
    assert evicted["error"]["code"] == "previous_response_not_found"
    assert len(llm.requests) == 1


def test_bad_messages_are_refused_with_a_field_path_and_no_key_no_socket(gateway) -> None:
    url = gateway.url.replace("http", "ws") + "/v1/responses"
    headers = {"Authorization": f"Bearer {gateway.key}"}

    with connect(url, additional_headers=headers) as ws:
        ws.send(json.dumps({"type": "session.update"}))
        wrong_type = json.loads(ws.recv())
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "x", "background": True}))
        background = json.loads(ws.recv())
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "x", "colour": "red"}))
        unknown = json.loads(ws.recv())
    with pytest.raises(InvalidStatus) as denied:
        connect(url, additional_headers={"Authorization": "Bearer wrong"}).close()

    assert wrong_type["error"]["param"] == "type" and wrong_type["status"] == 400
    assert background["error"]["param"] == "background"
    assert "colour: unsupported parameter" in unknown["error"]["message"]
    assert denied.value.response.status_code == 401


def test_compact_then_continue_from_the_compacted_window(gateway, llm: ScriptedLLM) -> None:
    llm.reply("Paris is the capital of France.")
    llm.reply("SUMMARY: the assistant said Paris is the capital of France.")
    llm.reply("Yes, Paris.")
    client = gateway.client()
    first = client.responses.create(model="gpt-4o", input="What is the capital of France?")

    raw = client.responses.with_raw_response.compact(model="gpt-4o", previous_response_id=first.id)
    compacted, window = raw.parse(), raw.http_response.json()["output"]
    with client.responses.connect() as conn:
        conn.response.create(
            model="gpt-4o", store=False, input=[*window, {"role": "user", "content": "Sure?"}]
        )
        events = turn(conn)

    assert compacted.object == "response.compaction"
    assert [i.type for i in compacted.output] == ["message", "compaction"]
    assert window[0]["role"] == "user" and window[0]["content"][0]["text"] == "What is the capital of France?"
    assert "SUMMARY" not in compacted.output[1].encrypted_content  # sealed, not readable
    assert compacted.usage.total_tokens > 0
    summariser = llm.requests[1]["messages"]
    assert "Paris is the capital of France." in summariser[-1]["content"]
    assert events[-1]["type"] == "response.completed"
    continued = llm.requests[2]["messages"]
    assert [m["role"] for m in continued] == ["user", "system", "user"]
    assert continued[1]["content"].endswith("SUMMARY: the assistant said Paris is the capital of France.")


def test_a_compaction_item_from_another_organisation_does_not_open(gateway, llm: ScriptedLLM) -> None:
    llm.reply("hello")
    llm.reply("summary")
    client = gateway.client()
    first = client.responses.create(model="gpt-4o", input="hi")
    raw = client.responses.with_raw_response.compact(model="gpt-4o", previous_response_id=first.id)
    window = raw.http_response.json()["output"]
    other = gateway.client(gateway.new_org().key)

    with pytest.raises(openai.BadRequestError) as refused:
        other.responses.create(model="gpt-4o", input=window)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.compact(model="gpt-4o", previous_response_id="resp_nowhere")

    assert refused.value.body["param"] == "input[1].encrypted_content"
    assert missing.value.body["code"] == "previous_response_not_found"
    assert len(llm.requests) == 2


def test_compact_with_only_user_messages_needs_no_model_call(gateway, llm: ScriptedLLM) -> None:
    compacted = gateway.client().responses.compact(model="gpt-4o", input=[{"role": "user", "content": "hi"}])

    assert [i.type for i in compacted.output] == ["message", "compaction"]
    assert llm.requests == []
