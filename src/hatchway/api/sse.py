"""Server-sent events helpers."""

from __future__ import annotations

from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def data_event(payload: Any) -> bytes:
    """``data: <json>`` framing (Chat Completions)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def typed_event(payload: dict[str, Any]) -> bytes:
    """``event: <type>`` + ``data: <json>`` framing (Responses)."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
