"""Responses streaming: the SDK's ``responses.stream`` and the raw SSE frames against its event types."""

from __future__ import annotations

import json

from tests.support.agent_loop import rounds
from tests.support.open_responses import check_event
from tests.support.responses_api import WEATHER, raw_events
from tests.support.scripted_llm import Reply, ScriptedLLM


def lifecycle_ids(events: list[dict]) -> set[str]:
    return {e["response"]["id"] for e in events if "response" in e}


def test_sdk_stream_of_text(gateway, llm: ScriptedLLM) -> None:
    llm.reply("streaming works fine", chunk_size=4)
    client = gateway.client()

    with client.responses.stream(model="gpt-4o", input="go") as stream:
        events = list(stream)
        final = stream.get_final_response()

    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 5
    assert (
        "".join(e.delta for e in events if e.type == "response.output_text.delta") == "streaming works fine"
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == "streaming works fine" and final.status == "completed"
    assert client.responses.retrieve(final.id).output[0].id == final.output[0].id


def test_raw_stream_event_order_and_one_id(gateway, llm: ScriptedLLM) -> None:
    llm.reply("hi there")

    events = raw_events(gateway, {"model": "gpt-4o", "input": "x", "stream": True})

    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert len(lifecycle_ids(events)) == 1
    item_ids = {e["item_id"] for e in events if "item_id" in e} | {
        e["item"]["id"] for e in events if "item" in e
    }
    assert item_ids == {events[-1]["response"]["output"][0]["id"]}


def test_stream_of_a_client_function_call(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("get_weather", {"city": "Faro"}, "call_f")])
    client = gateway.client()

    with client.responses.stream(model="gpt-4o", input="Faro?", tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()

    types = [e.type for e in events]
    for expected in (
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ):
        assert expected in types
    call = final.output[0]
    assert (call.type, call.call_id, json.loads(call.arguments)) == (
        "function_call",
        "call_f",
        {"city": "Faro"},
    )
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.item_id == call.id


def test_upstream_failure_mid_stream_is_error_then_failed(gateway, llm: ScriptedLLM) -> None:
    # Output has begun (the first round's text) when the second model call fails: the status is sent.
    llm.handler = rounds(
        Reply(text="Looking.", tool_calls=[("not_a_tool", {})]), Reply(status=500, error="upstream exploded")
    )

    events = raw_events(gateway, {"model": "gpt-4o", "input": "x", "stream": True})

    types = [e["type"] for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-2:] == ["error", "response.failed"]
    error = events[-2]
    assert "upstream exploded" in error["message"]
    assert error["error"]["message"] == error["message"]  # nested too, for the Open Responses schema
    assert error["error"]["type"] == "upstream_error"
    for event in events:  # the Open Responses schema has no mcp_call item (the unknown tool's call)
        if "mcp_call" not in event["type"] and event.get("item", {}).get("type") != "mcp_call":
            check_event(event)
    assert events[-1]["response"]["status"] == "failed"
    assert len(lifecycle_ids(events)) == 1
    stored = gateway.client().responses.retrieve(events[0]["response"]["id"])
    assert stored.status == "failed"


def test_output_cut_by_max_output_tokens_is_incomplete(gateway, llm: ScriptedLLM) -> None:
    llm.reply("partial answ", finish_reason="length")
    llm.reply("partial answ", finish_reason="length")

    events = raw_events(gateway, {"model": "gpt-4o", "input": "x", "stream": True, "max_output_tokens": 3})
    plain = gateway.client().responses.create(model="gpt-4o", input="x", max_output_tokens=3)

    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    assert plain.status == "incomplete" and plain.incomplete_details.reason == "max_output_tokens"
    assert plain.output_text == "partial answ" and plain.completed_at is None
