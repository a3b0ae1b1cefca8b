"""The scripted upstream's answers in Anthropic's Messages and Google Gemini's ``generateContent``
shapes: one ``Reply`` as a whole message, or as the events of a stream (``demo/upstream.py``
serves them at ``POST /v1/messages`` and ``POST /v1beta/models/<model>:generateContent``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any, Protocol


class Reply(Protocol):
    """What of ``demo.upstream.Reply`` these shapes read."""

    text: str | None
    tool_calls: Sequence[tuple[Any, ...]]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    chunk_size: int


_ids = itertools.count(1)
_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _call_id(call: tuple[Any, ...], prefix: str) -> str:
    return call[2] if len(call) > 2 else f"{prefix}{next(_ids)}"


# -- Anthropic -----------------------------------------------------------------------------------


def anthropic_message(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text is not None:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": _call_id(call, "toolu_"), "name": call[0], "input": call[1]}
        )
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return {
        "id": f"msg_scripted_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "stop_sequence" if reply.stop_sequence else _STOP.get(finish, finish),
        "stop_sequence": reply.stop_sequence,
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "output_tokens": reply.completion_tokens,
            "cache_read_input_tokens": reply.cached_tokens,
            "cache_creation_input_tokens": 0,
        },
    }


def anthropic_events(reply: Reply, message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``message`` as the (event, data) pairs of a Messages stream."""
    step = max(1, reply.chunk_size)
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    out: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            head = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": block["text"][i : i + step]}
                for i in range(0, len(block["text"]), step)
            ]
        else:
            head = {**block, "input": {}}
            args = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": args[i : i + step]}
                for i in range(0, len(args), step)
            ]
        out.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": head})
        )
        out.append(("ping", {"type": "ping"}))
        out += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    final = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    out.append(("message_delta", {"type": "message_delta", "delta": final, "usage": usage}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
    kind = kinds.get(status, "overloaded_error" if status == 529 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


# -- Gemini --------------------------------------------------------------------------------------


def gemini_response(reply: Reply, model: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if reply.text is not None:
        parts.append({"text": reply.text})
    for call in reply.tool_calls:
        parts.append({"functionCall": {"id": _call_id(call, "fc_"), "name": call[0], "args": call[1]}})
    finish = {"length": "MAX_TOKENS"}.get(reply.finish_reason or "", "STOP")
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {
            "promptTokenCount": reply.prompt_tokens + reply.cached_tokens,  # cached ones are a part of it
            "candidatesTokenCount": reply.completion_tokens,
            "totalTokenCount": reply.prompt_tokens + reply.cached_tokens + reply.completion_tokens,
            "cachedContentTokenCount": reply.cached_tokens,
        },
        "modelVersion": model,
        "responseId": f"gemini-scripted-{next(_ids)}",
    }


def gemini_chunks(reply: Reply, whole: dict[str, Any]) -> list[dict[str, Any]]:
    """``whole`` as the chunks of ``streamGenerateContent``: the text a few characters at a time,
    each function call whole, the usage on the last chunk."""
    step = max(1, reply.chunk_size)
    candidate = whole["candidates"][0]
    base = {k: whole[k] for k in ("modelVersion", "responseId")}
    out = []
    for part in candidate["content"]["parts"]:
        pieces = (
            [{"text": part["text"][i : i + step]} for i in range(0, len(part["text"]), step)]
            if "text" in part
            else [part]
        )
        out += [
            {**base, "candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]} for p in pieces
        ]
    last = {"content": {"role": "model", "parts": []}, "finishReason": candidate["finishReason"], "index": 0}
    out.append({**base, "candidates": [last], "usageMetadata": whole["usageMetadata"]})
    return out


def gemini_error(status: int, message: str) -> dict[str, Any]:
    names = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        429: "RESOURCE_EXHAUSTED",
    }
    return {"error": {"code": status, "message": message, "status": names.get(status, "INTERNAL")}}
