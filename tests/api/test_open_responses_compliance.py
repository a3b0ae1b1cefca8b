"""The Open Responses compliance checks, against ``hatchway serve``'s app over real HTTP and WebSocket.

Each test sends what a test of the Open Responses compliance harness (``bin/compliance-test.ts``)
sends and checks what it checks, with every response, streamed event, WebSocket error and
compaction validated against the published schema (``tests/support/open_responses.py``). The
upstream model is the scripted one, answering like a model would (``deterministic_model``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.support.open_responses import (
    check_compaction,
    check_event,
    check_resource,
    check_socket_error,
    deterministic_model,
)
from tests.support.scripted_llm import ScriptedLLM

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city and state"}},
        "required": ["location"],
    },
}
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
RED_HEART_PNG = f"data:image/png;base64,{PIXEL}"
PDF = "data:application/pdf;base64,JVBERi0xLjEKJSVFT0YK"


@pytest.fixture
def api(gateway, llm: ScriptedLLM):  # type: ignore[no-untyped-def]
    llm.handler = deterministic_model
    with httpx.Client(
        base_url=f"{gateway.url}/v1", headers={"authorization": f"Bearer {gateway.key}"}, timeout=30
    ) as client:
        yield client


def create(api: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post("/responses", json={"model": "gpt-4o", **body})
    assert response.status_code == 200, response.text
    payload = response.json()
    check_resource(payload)
    return payload


def stream(api: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with api.stream("POST", "/responses", json={"model": "gpt-4o", **body, "stream": True}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                check_event(event)
                events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def completed_with_output(payload: dict[str, Any]) -> None:
    assert payload["output"], "Response has no output items"
    assert payload["status"] == "completed"


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_basic_response(api: httpx.Client) -> None:
    completed_with_output(create(api, {"input": [user("Say hello in exactly 3 words.")]}))


def test_streaming_response(api: httpx.Client) -> None:
    events = stream(api, {"input": [user("Count from 1 to 5.")]})

    final = events[-1]
    assert final["type"] == "response.completed"
    check_resource(final["response"])
    assert final["response"]["status"] == "completed"


def test_system_prompt(api: httpx.Client) -> None:
    system = {"type": "message", "role": "system", "content": "You are a pirate."}
    completed_with_output(create(api, {"input": [system, user("Say hello.")]}))


def test_tool_calling(api: httpx.Client) -> None:
    payload = create(
        api, {"input": [user("What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]}
    )

    assert any(item["type"] == "function_call" for item in payload["output"])


def test_tool_calling_streaming(api: httpx.Client) -> None:
    events = stream(api, {"input": [user("What's the weather in San Francisco?")], "tools": [WEATHER_TOOL]})

    types = [e["type"] for e in events]
    assert any(
        e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call" for e in events
    )
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    assert any(
        e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call" for e in events
    )


def test_function_call_round_trip(api: httpx.Client) -> None:
    first = create(
        api,
        {
            "input": "Use the weather tool to get the temperature in San Francisco.",
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "name": "get_weather"},
        },
    )
    call = next(item for item in first["output"] if item["type"] == "function_call")

    second = create(
        api,
        {
            "previous_response_id": first["id"],
            "input": [
                {"type": "function_call_output", "call_id": call["call_id"], "output": "64 degrees and clear"}
            ],
        },
    )

    completed_with_output(second)


def test_image_input(api: httpx.Client, llm: ScriptedLLM) -> None:
    content = [
        {"type": "input_text", "text": "What do you see?"},
        {"type": "input_image", "image_url": RED_HEART_PNG},
    ]

    completed_with_output(create(api, {"input": [{"type": "message", "role": "user", "content": content}]}))

    [part] = [p for p in llm.requests[-1]["messages"][-1]["content"] if p["type"] == "image_url"]
    assert part["image_url"]["url"] == RED_HEART_PNG


def test_file_input(api: httpx.Client, llm: ScriptedLLM) -> None:
    content = [
        {"type": "input_text", "text": "Answer with the file's title only."},
        {"type": "input_file", "filename": "fixture.pdf", "file_data": PDF},
    ]

    completed_with_output(create(api, {"input": [{"type": "message", "role": "user", "content": content}]}))

    [part] = [p for p in llm.requests[-1]["messages"][-1]["content"] if p["type"] == "file"]
    assert part["file"] == {"filename": "fixture.pdf", "file_data": PDF}


def test_multi_turn(api: httpx.Client) -> None:
    history = [
        user("My name is Alice."),
        {"type": "message", "role": "assistant", "content": "Hello Alice! How can I help you today?"},
        user("What is my name?"),
    ]
    completed_with_output(create(api, {"input": history}))


def test_previous_response_id(api: httpx.Client, llm: ScriptedLLM) -> None:
    first = create(api, {"input": "Remember this code word: papaya. Reply with only OK."})

    second = create(
        api, {"previous_response_id": first["id"], "input": "What code word did I ask you to remember?"}
    )

    completed_with_output(second)
    assert "papaya" in llm.requests[-1]["messages"][0]["content"]


def socket(gateway):  # type: ignore[no-untyped-def]
    url = gateway.url.replace("http", "ws") + "/v1/responses"
    return connect(url, additional_headers={"Authorization": f"Bearer {gateway.key}"})


def socket_turn(ws: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", **body}))
    events = []
    while True:
        event = json.loads(ws.recv())
        events.append(event)
        if "sequence_number" not in event:  # a refused request: the WebSocket error event
            check_socket_error(event)
            return events
        check_event(event)
        if event["type"] in ("response.completed", "response.failed", "response.incomplete"):
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            check_resource(event["response"])
            return events


def test_websocket_sequential_turns_and_store_false_continuation(gateway, api: httpx.Client) -> None:
    with socket(gateway) as ws:
        first = socket_turn(ws, {"input": "Remember papaya.", "store": False})
        second = socket_turn(
            ws, {"input": "Which word?", "store": False, "previous_response_id": first[-1]["response"]["id"]}
        )
        third = socket_turn(
            ws, {"input": "Say it again.", "previous_response_id": second[-1]["response"]["id"]}
        )

    for events in (first, second, third):
        assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    assert second[-1]["response"]["previous_response_id"] == first[-1]["response"]["id"]
    assert api.get(f"/responses/{third[-1]['response']['id']}").status_code == 200  # store defaults to true


def test_websocket_previous_response_not_found(gateway, api: httpx.Client) -> None:
    with socket(gateway) as ws:
        [error] = socket_turn(ws, {"input": "x", "store": False, "previous_response_id": "resp_missing"})
        again = socket_turn(ws, {"input": "still open?", "store": False})

    assert error["error"]["code"] == "previous_response_not_found"
    assert again[-1]["type"] == "response.completed"


def test_compact(api: httpx.Client, llm: ScriptedLLM) -> None:
    first = create(api, {"input": "Remember papaya."})

    response = api.post("/responses/compact", json={"model": "gpt-4o", "previous_response_id": first["id"]})

    assert response.status_code == 200, response.text
    compacted = response.json()
    check_compaction(compacted)
    assert compacted["output"][-1]["type"] == "compaction"
    completed_with_output(create(api, {"input": [*compacted["output"], user("Go on.")]}))


def test_an_unknown_previous_response_over_http_has_the_same_code(api: httpx.Client) -> None:
    response = api.post(
        "/responses", json={"model": "gpt-4o", "input": "x", "previous_response_id": "resp_gone"}
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "previous_response_not_found"
    assert response.json()["error"]["param"] == "previous_response_id"
