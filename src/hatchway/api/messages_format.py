"""Anthropic's Messages API as a client sends it (``POST /v1/messages``) ⇄ the engine's items and
run results: the request model, its messages as canonical items, and a finished run as a
``message`` object or as the events of its stream (docs/clients.md, "Claude Code and the
Anthropic SDKs")."""

from __future__ import annotations

import math
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from hatchway.api.sse import SSE_HEADERS
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message, ToolSpec, Usage
from hatchway.engine.loop import RunResult
from hatchway.errors import HatchwayError, InvalidRequest
from hatchway.ids import new_id

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
_DROPPED_BLOCKS = ("thinking", "redacted_thinking")
"""Blocks of earlier assistant turns not sent upstream (an OpenAI-compatible one would refuse them)."""


class MessagesTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class MessagesRequest(BaseModel):
    """The body of ``POST /v1/messages`` (what the gateway reads; other keys are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[Any], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    system: str | list[Any] | None = None
    tools: list[MessagesTool] | None = None
    tool_choice: dict[str, Any] | None = None
    stream: StrictBool = False
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: list[str] | None = None

    def client_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=t.name,
                description=t.description or "",
                parameters=t.input_schema or {"type": "object", "properties": {}},
                deferred=(t.model_extra or {}).get("defer_loading") is True,
            )
            for t in self.tools or []
            # Anthropic's server tools (``web_search_20250305``…) are not run here; custom ones are.
            if (t.model_extra or {}).get("type") in (None, "custom")
        ]

    def tool_choice_and_parallel(self) -> tuple[Any, bool | None]:
        choice = self.tool_choice or {}
        parallel = False if choice.get("disable_parallel_tool_use") else None
        kind = choice.get("type")
        if kind == "any":
            return "required", parallel
        if kind == "none":
            return "none", parallel
        if kind == "tool" and isinstance(choice.get("name"), str):
            return {"type": "function", "function": {"name": choice["name"]}}, parallel
        return None, parallel

    def params(self) -> dict[str, Any]:
        """The sampling parameters, by their OpenAI names (what every provider reads)."""
        out: dict[str, Any] = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        if self.temperature is not None:
            out["temperature"] = self.temperature
        if self.top_p is not None:
            out["top_p"] = self.top_p
        if self.stop_sequences:
            out["stop"] = self.stop_sequences
        return out


# -- request → items -----------------------------------------------------------------------------


def _part(block: dict[str, Any], role: str, path: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        part: dict[str, Any] = {"type": "output_text" if role == "assistant" else "input_text"}
        part["text"] = str(block.get("text", ""))
    elif kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        elif source.get("type") == "url":
            url = str(source.get("url", ""))
        else:
            raise InvalidRequest(f"{path}.source.type: must be base64 or url", param=f"{path}.source.type")
        part = {"type": "input_image", "image_url": url}
    elif kind in _DROPPED_BLOCKS:
        return None
    else:
        return dict(block)  # a document or another block: passed on as it is
    if "cache_control" in block:
        part["cache_control"] = block["cache_control"]
    return part


def _result(block: dict[str, Any], path: str) -> FunctionCallOutput:
    """A ``tool_result`` block: its text, and its other blocks (an image Claude Code's ``Read``
    returned, ``tool_reference`` blocks of its ``ToolSearch``…) as parts; ``is_error`` and
    ``cache_control`` kept."""
    content = block.get("content")
    parts: list[dict[str, Any]] | None = None
    if isinstance(content, str) or content is None:
        text = content or ""
    elif isinstance(content, list):
        parts = []
        for k, b in enumerate(content):
            where = f"{path}.content[{k}]"
            if not isinstance(b, dict) or not isinstance(b.get("type"), str):
                raise InvalidRequest(f"{where}: must be an object with a 'type'", param=where)
            if (part := _part(b, "user", where)) is not None:
                parts.append(part)
        text = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "input_text")
        if all(p.get("type") == "input_text" and "cache_control" not in p for p in parts):
            parts = None  # text alone: the output says it all
    else:
        raise InvalidRequest(
            f"{path}.content: must be a string or an array of blocks", param=f"{path}.content"
        )
    cache = block.get("cache_control")
    return FunctionCallOutput(
        call_id=block["tool_use_id"],
        output=text,
        parts=parts,
        is_error=block.get("is_error") is True,
        cache_control=cache if isinstance(cache, dict) else None,
    )


def _turn(message: Any, path: str) -> list[Item]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        raise InvalidRequest(f"{path}.role: must be user, assistant or system", param=f"{path}.role")
    role = message["role"]  # a system turn among the messages (Claude Code sends them) stays one
    content = message.get("content")
    if isinstance(content, str):
        return [Message(role=role, content=content)]
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{path}.content: must be a string or an array of blocks", param=f"{path}.content"
        )
    items: list[Item] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"{path}.content[{j}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{where}: must be an object with a 'type'", param=where)
        if block["type"] == "tool_use" and role == "assistant":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise InvalidRequest(f"{where}: a tool_use needs 'id' and 'name'", param=where)
            arguments = orjson.dumps(block.get("input") or {}).decode()
            items.append(FunctionCall(call_id=block["id"], name=block["name"], arguments=arguments))
        elif block["type"] == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str):
                raise InvalidRequest(f"{where}.tool_use_id: required", param=f"{where}.tool_use_id")
            items.append(_result(block, where))
        elif (part := _part(block, role, where)) is not None:
            parts.append(part)
    text = [Message(role=role, content=parts)] if parts else []
    # A user turn answers its tool calls first, then says more; an assistant speaks, then calls.
    return [*items, *text] if role == "user" else [*text, *items]


def request_items(body: MessagesRequest) -> list[Item]:
    """The system prompt and the messages, as canonical items (field paths in every error)."""
    items: list[Item] = []
    if isinstance(body.system, str) and body.system:
        items.append(Message(role="system", content=body.system))
    elif isinstance(body.system, list):
        parts = [_part(b, "system", f"system[{i}]") for i, b in enumerate(body.system) if isinstance(b, dict)]
        items.append(Message(role="system", content=[p for p in parts if p is not None]))
    for i, message in enumerate(body.messages):
        items.extend(_turn(message, f"messages[{i}]"))
    return items


def estimated_tokens(raw: bytes) -> int:
    """``count_tokens``' answer: the request's bytes over four (an estimate; no tokenizer is loaded)."""
    return max(1, math.ceil(len(raw) / 4))


# -- results → a message -------------------------------------------------------------------------


def _usage(usage: Usage) -> dict[str, int]:
    """Anthropic counts cache reads and writes apart from ``input_tokens``."""
    fresh = max(usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens, 0)
    return {
        "input_tokens": fresh,
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
    }


def _tool_use(call: FunctionCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.call_id, "name": call.name, "input": call.arguments_object()}


def _stop(result: RunResult) -> dict[str, Any]:
    """``stop_reason`` and ``stop_sequence``: which stop sequence ended the answer when a native
    Anthropic upstream said (an OpenAI-shaped one reports ``stop`` alone: ``end_turn``)."""
    raw = result.last_response.raw if result.last_response is not None else {}
    sequence = raw.get("stop_sequence") if result.finish_reason == "stop" else None
    if isinstance(sequence, str):
        return {"stop_reason": "stop_sequence", "stop_sequence": sequence}
    return {"stop_reason": STOP_REASONS.get(result.finish_reason, "end_turn"), "stop_sequence": None}


def message_body(result: RunResult, model: str, message_id: str | None = None) -> dict[str, Any]:
    """A finished run as a ``message`` object."""
    content: list[dict[str, Any]] = [{"type": "text", "text": result.text}] if result.text else []
    content += [_tool_use(c) for c in result.client_calls]
    return {
        "id": message_id or new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        **_stop(result),
        "usage": _usage(result.usage),
    }


def error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class EventWriter:
    """A run's output as a Messages stream: ``message_start``, a text block as the text arrives, the
    client tool calls as ``tool_use`` blocks at the end, ``message_delta`` and ``message_stop``."""

    headers = SSE_HEADERS

    def __init__(self, model: str) -> None:
        self.id = new_id("msg")
        self.model = model
        self.index = 0
        self.text_open = False

    def start(self) -> bytes:
        message = message_body(RunResult(), self.model, self.id)
        message["stop_reason"] = None
        return event("message_start", {"type": "message_start", "message": message})

    def text(self, text: str) -> list[bytes]:
        out = []
        if not self.text_open:
            self.text_open = True
            block = {"type": "text", "text": ""}
            out.append(
                event(
                    "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
                )
            )
        delta = {"type": "text_delta", "text": text}
        out.append(event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
        return out

    def finish(self, result: RunResult) -> list[bytes]:
        out = []
        if self.text_open:
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1 if self.text_open else 0
        for call in result.client_calls:
            use = _tool_use(call)
            head = {**use, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": orjson.dumps(use["input"]).decode()}
            out.append(
                event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": head},
                )
            )
            out.append(
                event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))
            index += 1
        final = _stop(result)
        usage = _usage(result.usage)
        out.append(event("message_delta", {"type": "message_delta", "delta": final, "usage": usage}))
        out.append(event("message_stop", {"type": "message_stop"}))
        return out

    def failed(self, exc: HatchwayError) -> bytes:
        return event("error", error_body(exc.status_code, exc.message))
