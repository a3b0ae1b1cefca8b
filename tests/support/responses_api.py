"""Helpers for Responses API tests: a strict function tool, the raw SSE frames of a stream checked
against the SDK's event types, and polling a background response to a status."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support.servers import wait_until

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}

EVENTS = TypeAdapter(ResponseStreamEvent)


def raw_events(
    gateway, body: dict[str, Any], method: str = "POST", path: str = "/v1/responses"
) -> list[dict]:
    """Every SSE frame, checked: ``event:`` equals the JSON type and each validates as an SDK event."""
    headers = {"authorization": f"Bearer {gateway.key}"}
    with httpx.stream(method, f"{gateway.url}{path}", json=body or None, headers=headers, timeout=30) as r:
        return checked_events(r)


def checked_events(r: httpx.Response) -> list[dict]:
    """The SSE frames of a streamed response, checked as ``raw_events`` checks them."""
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = []
    name = None
    for line in r.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            payload = json.loads(line[6:])
            assert payload["type"] == name
            EVENTS.validate_python(payload)
            events.append(payload)
    return events


def poll(client: openai.OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float = 10.0):
    """The response once it reaches one of ``statuses`` (fails after ``timeout`` seconds)."""

    def reached():
        current = client.responses.retrieve(response_id)
        return current if current.status in statuses else None

    return wait_until(reached, timeout=timeout, message=f"{response_id} to reach {statuses}")
