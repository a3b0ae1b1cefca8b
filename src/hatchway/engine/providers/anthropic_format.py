"""Canonical items ⇄ Anthropic's Messages API (``POST /v1/messages``): the request body the
Anthropic provider sends, and the reply (or stream of events) it reads back into a ``ModelResponse``.

Mapped: system and developer messages → ``system`` (text blocks, each part's ``cache_control``
kept); user and assistant turns (consecutive ones of a role merged, as the API wants them
alternating); text, images (``data:`` URLs as base64 sources, others as URL sources); function
calls → ``tool_use`` blocks, their outputs → ``tool_result`` blocks of a user turn; tools →
``input_schema``; ``tool_choice`` and ``parallel_tool_calls: false`` → ``disable_parallel_tool_use``;
``max_tokens`` (which Anthropic requires: ``DEFAULT_MAX_TOKENS`` when the request says none),
``temperature``, ``top_p``, ``top_k``, ``stop`` → ``stop_sequences``, ``thinking`` and ``metadata``
passed on. Content parts of a type Anthropic knows and OpenAI does not (``thinking``,
``redacted_thinking``, ``document``) are passed through as they are. Every other OpenAI parameter
(``response_format``, ``seed``, ``n``, ``logprobs``…) is not sent (docs/providers.md).

Read back: text blocks joined, ``tool_use`` blocks as function calls, ``thinking`` blocks kept in
``ModelResponse.raw["thinking"]``; usage with the prompt cache's reads and writes counted in the
prompt (as OpenAI counts them) and reported as ``cached_tokens`` / ``cache_write_tokens``; stop
reasons as OpenAI's finish reasons.
"""

from __future__ import annotations

from typing import Any, Required

import orjson
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from hatchway.engine.items import DATA_URL, FunctionCall, FunctionCallOutput, Item, Message, ToolSpec, Usage
from hatchway.engine.providers.base import (
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextDelta,
    TokenCount,
    ToolCallDelta,
    output_limit,
)
from hatchway.engine.providers.chat_replies import malformed
from hatchway.errors import ProviderMalformed, ProviderStatusError

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` of a request that sets none (Anthropic requires one)."""
ANTHROPIC_VERSION = "2023-06-01"
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_PASSED_PARAMS = ("temperature", "top_p", "top_k", "thinking", "metadata", "service_tier")
MAX_BLOCKS = 1024
"""Content blocks a streamed message may index: a higher index is a malformed stream (a block list
is never grown to an upstream's number)."""


# -- the request ---------------------------------------------------------------------------------


def _block(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        block: dict[str, Any] = {"type": "text", "text": part.get("text", "")}
    elif kind == "input_image":
        url = str(part.get("image_url") or "")
        match = DATA_URL.match(url)
        source = (
            {"type": "base64", "media_type": match["media"], "data": match["data"]}
            if match
            else {"type": "url", "url": url}
        )
        block = {"type": "image", "source": source}
    else:  # thinking, redacted_thinking, document, or an Anthropic block sent as it is
        return dict(part)
    if "cache_control" in part:
        block["cache_control"] = part["cache_control"]
    return block


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [_block(p) for p in content]


def _tool_result(item: FunctionCallOutput) -> dict[str, Any]:
    """A tool's result as Anthropic takes it: its blocks as they came (images, documents,
    ``tool_reference``…), ``is_error`` and the prompt-cache breakpoint kept."""
    result: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": item.call_id,
        "content": [_block(p) for p in item.parts] if item.parts else item.output,
    }
    if item.is_error:
        result["is_error"] = True
    if item.cache_control is not None:
        result["cache_control"] = item.cache_control
    return result


def request_messages(items: list[Item]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Items → (``system`` blocks, ``messages``), turns of one role merged."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []

    def turn(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        elif blocks:
            messages.append({"role": role, "content": blocks})

    for item in items:
        if isinstance(item, Message):
            if item.role in ("system", "developer"):
                system.extend(_blocks(item.content))
            else:
                turn(item.role, _blocks(item.content))
        elif isinstance(item, FunctionCall):
            use = {
                "type": "tool_use",
                "id": item.call_id,
                "name": item.name,
                "input": item.arguments_object(),
            }
            turn("assistant", [use])
        elif isinstance(item, FunctionCallOutput):
            turn("user", [_tool_result(item)])
    return system, messages


def _tool_choice(choice: Any, parallel: bool | None) -> dict[str, Any] | None:
    out: dict[str, Any] | None
    if choice in (None, "auto"):
        out = {"type": "auto"} if parallel is False else None
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    elif isinstance(choice, dict) and choice.get("type") in ("auto", "any", "tool", "none"):
        out = dict(choice)  # already Anthropic's
    else:
        out = None
    if out is not None and parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def messages_body(req: ModelRequest, *, stream: bool) -> dict[str, Any]:
    """The ``POST /v1/messages`` body of ``req``."""
    system, messages = request_messages(req.items)
    params = req.params
    body: dict[str, Any] = {
        "model": req.model,
        "max_tokens": output_limit(params) or DEFAULT_MAX_TOKENS,
        "messages": messages,
    }
    if system:
        body["system"] = system
    body.update((k, params[k]) for k in _PASSED_PARAMS if params.get(k) is not None)
    stop = params.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if req.tools:
        body["tools"] = [_tool(t) for t in req.tools]
        choice = _tool_choice(req.tool_choice, req.parallel_tool_calls)
        if choice is not None:
            body["tool_choice"] = choice
    if stream:
        body["stream"] = True
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name, "description": spec.description}
    tool["input_schema"] = spec.parameters
    if spec.deferred:
        tool["defer_loading"] = True
    return tool


# -- the reply -----------------------------------------------------------------------------------


class WireUsage(TypedDict, total=False):
    input_tokens: TokenCount | None
    output_tokens: TokenCount | None
    cache_read_input_tokens: TokenCount | None
    cache_creation_input_tokens: TokenCount | None


class _Block(TypedDict, total=False):
    type: Required[str]
    text: str | None
    id: str | None
    name: str | None
    input: Any
    thinking: str | None
    signature: str | None
    data: str | None


class WireMessage(TypedDict, total=False):
    id: str | None
    model: str | None
    content: Required[list[_Block]]
    stop_reason: str | None
    stop_sequence: str | None
    usage: WireUsage | None


_MESSAGE = TypeAdapter(WireMessage)


def usage_of(usage: WireUsage | None) -> Usage:
    usage = usage or {}
    read = usage.get("cache_read_input_tokens") or 0
    write = usage.get("cache_creation_input_tokens") or 0
    return Usage(
        prompt_tokens=(usage.get("input_tokens") or 0) + read + write,
        completion_tokens=usage.get("output_tokens") or 0,
        cached_tokens=read,
        cache_write_tokens=write,
    )


def parse_message(raw: bytes, provider_id: str) -> ModelResponse:
    """A non-streamed ``message`` → the response."""
    try:
        message = _MESSAGE.validate_json(raw)
    except ValidationError as exc:
        raise malformed(provider_id, "a Messages reply", exc, raw) from None
    return response_of(message)


def response_of(message: WireMessage) -> ModelResponse:
    texts: list[str] = []
    calls: list[FunctionCall] = []
    thinking: list[dict[str, Any]] = []
    for block in message["content"]:
        kind = block["type"]
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append(
                FunctionCall(call_id=block.get("id") or "", name=block.get("name") or "", arguments=arguments)
            )
        elif kind in ("thinking", "redacted_thinking"):
            thinking.append({k: v for k, v in block.items() if v is not None})
    raw: dict[str, Any] = {"id": message.get("id")} if message.get("id") else {}
    if thinking:
        raw["thinking"] = thinking
    stop = message.get("stop_reason") or "end_turn"
    if stop == "stop_sequence" and message.get("stop_sequence"):
        raw["stop_sequence"] = message.get("stop_sequence")  # which one: the Messages API says it back
    return ModelResponse(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        finish_reason=FINISH_REASONS.get(stop, "stop"),
        usage=usage_of(message.get("usage")),
        model=message.get("model") or "",
        raw=raw,
    )


class _Delta(TypedDict, total=False):
    type: str | None
    text: str | None
    partial_json: str | None
    thinking: str | None
    signature: str | None
    stop_reason: str | None
    stop_sequence: str | None


class _Error(TypedDict, total=False):
    type: str | None
    message: str | None


class WireEvent(TypedDict, total=False):
    type: Required[str]
    index: int | None
    message: WireMessage | None
    content_block: _Block | None
    delta: _Delta | None
    usage: WireUsage | None
    error: _Error | None


_EVENT = TypeAdapter(WireEvent)


class EventAssembler:
    """A Messages stream's events (``data:`` lines) → deltas, then the whole response."""

    def __init__(self, provider_id: str) -> None:
        self.provider_id = provider_id
        self.message: WireMessage = {"content": []}
        self._tool_index: dict[int, int] = {}
        """Content block index → the tool call's index among the calls (what a ``ToolCallDelta`` says)."""
        self._json: dict[int, list[str]] = {}
        self._usage: WireUsage = {}

    def feed(self, line: bytes) -> list[StreamEvent]:
        if not line.startswith(b"data:"):
            return []  # ``event:`` lines repeat the data's type; blank lines end an event
        try:
            event = _EVENT.validate_json(line[5:])
        except ValidationError as exc:
            raise malformed(self.provider_id, "a stream event", exc, line[5:]) from None
        index = event.get("index") or 0
        if not 0 <= index < MAX_BLOCKS:
            raise ProviderMalformed(
                f"The upstream '{self.provider_id}' sent a stream event for content block {index} "
                f"(at most {MAX_BLOCKS} are read)."
            )
        return self._apply(event)

    def _apply(self, event: WireEvent) -> list[StreamEvent]:
        kind, index = event["type"], event.get("index") or 0
        if kind == "message_start" and event.get("message"):
            start = event["message"] or {"content": []}
            self.message = {**start, "content": list(start.get("content") or [])}
            self._usage.update({k: v for k, v in (start.get("usage") or {}).items() if v is not None})
        elif kind == "content_block_start" and event.get("content_block"):
            return self._start(index, dict(event["content_block"] or {"type": "text"}))  # type: ignore[arg-type]
        elif kind == "content_block_delta" and event.get("delta"):
            return self._delta(index, event["delta"] or {})
        elif kind == "content_block_stop" and index in self._json:
            block = self._blocks_at(index)
            text = "".join(self._json.pop(index))
            try:
                block["input"] = orjson.loads(text) if text else {}
            except orjson.JSONDecodeError:
                block["input"] = {"_raw": text}
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if delta.get("stop_reason"):
                self.message["stop_reason"] = delta.get("stop_reason")
            if delta.get("stop_sequence"):
                self.message["stop_sequence"] = delta.get("stop_sequence")
            self._usage.update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
        elif kind == "error":
            error = event.get("error") or {}
            status = 529 if error.get("type") == "overloaded_error" else 502
            raise ProviderStatusError(status, error.get("message") or "the upstream's stream failed")
        return []

    def _blocks_at(self, index: int) -> _Block:
        blocks = self.message["content"]
        while len(blocks) <= index:
            blocks.append({"type": "text", "text": ""})
        return blocks[index]

    def _start(self, index: int, block: _Block) -> list[StreamEvent]:
        blocks = self.message["content"]
        while len(blocks) < index:
            blocks.append({"type": "text", "text": ""})
        blocks[index : index + 1] = [block]
        if block["type"] != "tool_use":
            text = block.get("text") or ""
            return [TextDelta(text)] if block["type"] == "text" and text else []
        self._tool_index[index] = len(self._tool_index)
        self._json[index] = []
        return [ToolCallDelta(self._tool_index[index], block.get("id"), block.get("name"), "")]

    def _delta(self, index: int, delta: _Delta) -> list[StreamEvent]:
        block = self._blocks_at(index)
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = (block.get("text") or "") + (delta.get("text") or "")
            return [TextDelta(delta.get("text") or "")]
        if kind == "input_json_delta" and index in self._json:
            part = delta.get("partial_json") or ""
            self._json[index].append(part)
            return [ToolCallDelta(self._tool_index[index], None, None, part)] if part else []
        if kind == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + (delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        return []

    def finish(self) -> ModelResponse:
        for index in list(self._json):  # a tool block the stream never closed
            self._apply({"type": "content_block_stop", "index": index})
        self.message["usage"] = self._usage
        return response_of(self.message)
