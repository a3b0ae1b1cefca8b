"""The published Open Responses schema (``openresponses-types``, generated from its openapi.json) as checks.

``check_resource`` / ``check_event`` / ``check_socket_error`` / ``check_compaction`` validate a
payload against the model the specification defines for it, so a field the spec requires and
Hatchway forgets fails the test that received it.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

from openresponses_types import types as spec
from pydantic import BaseModel

from tests.support.scripted_llm import Reply


def _event_models() -> dict[str, type[BaseModel]]:
    models: dict[str, type[BaseModel]] = {}
    for name, cls in vars(spec).items():
        if not (isinstance(cls, type) and issubclass(cls, BaseModel) and name.endswith("StreamingEvent")):
            continue
        annotation = cls.model_fields["type"].annotation
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            values = [member.value for member in annotation]
        else:
            values = list(typing.get_args(annotation))
        for value in values:
            models[str(value)] = cls
    return models


EVENT_MODELS = _event_models()


def check_resource(payload: dict[str, Any]) -> spec.ResponseResource:
    return spec.ResponseResource.model_validate(payload)


def check_event(event: dict[str, Any]) -> BaseModel:
    """A streamed event: a type the spec defines, valid against it, with an integer sequence_number."""
    model = EVENT_MODELS.get(event.get("type", ""))
    assert model is not None, f"event type {event.get('type')!r} is not in the Open Responses spec"
    assert isinstance(event.get("sequence_number"), int), event
    return model.model_validate(event)


def check_socket_error(event: dict[str, Any]) -> spec.WebSocketErrorEvent:
    return spec.WebSocketErrorEvent.model_validate(event)


def check_compaction(payload: dict[str, Any]) -> spec.CompactResource:
    return spec.CompactResource.model_validate(payload)


def deterministic_model(body: dict[str, Any]) -> Reply:
    """Calls get_weather when it is offered and has not answered yet; otherwise says something short."""
    messages = body["messages"]
    answered = any(m["role"] == "tool" for m in messages)
    if body.get("tools") and not answered and body.get("tool_choice") != "none":
        return Reply(tool_calls=[("get_weather", {"location": "San Francisco, CA"})])
    if answered:
        return Reply(text="It is 64 degrees and clear in San Francisco.")
    return Reply(text="Hello there, friend!", chunk_size=4)
