"""An upstream's Chat Completions replies — one completion, or a stream of chunks — read into a
``ModelResponse``, or refused as ``ProviderMalformed`` with the field path that is wrong.

Each reply, and each chunk of a stream, is parsed and validated in one pass by pydantic-core
(``TypeAdapter.validate_json`` on the raw bytes: JSON, UTF-8 and the shape checked in Rust, no
Python per field). The shapes are TypedDicts — plain dicts come back, which costs about half what
building model instances does — holding only what the gateway reads, each field as loose as the
upstreams it meets send it (``null`` for a missing value, a streamed tool call without ``index``,
unknown keys ignored) and no looser: a number where text belongs or a string where an object
belongs is an error, never an empty answer. Messages name the field and never quote the reply,
which may be large or carry what a tool returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs its TypedDict before Python 3.12

from hatchway.config.loading import format_loc
from hatchway.engine.items import FunctionCall, Usage
from hatchway.engine.providers.base import (
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
    TokenCount,
    ToolCallDelta,
)
from hatchway.errors import ProviderMalformed, ProviderUnavailable
from hatchway.redaction import Redactor

MAX_ERROR_SNIPPET = 200

# -- the wire shapes (only what is read; every other key is ignored) ----------------------------------


class _TokenDetails(TypedDict, total=False):
    cached_tokens: TokenCount | None
    cache_write_tokens: TokenCount | None
    reasoning_tokens: TokenCount | None


class WireUsage(TypedDict, total=False):
    prompt_tokens: TokenCount | None
    completion_tokens: TokenCount | None
    prompt_tokens_details: _TokenDetails | None
    completion_tokens_details: _TokenDetails | None


class _Function(TypedDict, total=False):
    name: Required[str]
    arguments: str | None


class _ToolCall(TypedDict, total=False):
    id: str | None
    function: Required[_Function]


class _ContentPart(TypedDict, total=False):
    """Some upstreams send ``content`` as parts (text beside reasoning); only ``text`` parts answer."""

    type: Required[str]
    text: str | None


Content = str | list[_ContentPart] | None


def content_text(content: Content) -> str | None:
    """The answer's text: the string, or the text parts joined (None when there is none)."""
    if content is None or isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content if part["type"] == "text") or None


class _Message(TypedDict, total=False):
    content: Content
    tool_calls: list[_ToolCall] | None


class _Choice(TypedDict, total=False):
    message: Required[_Message]
    finish_reason: str | None


class WireCompletion(TypedDict, total=False):
    id: str | None
    model: str | None
    system_fingerprint: str | None
    service_tier: str | None
    usage: WireUsage | None
    choices: list[_Choice] | None
    error: Any
    """An upstream that failed after answering 200 says so here (and sends no choices)."""


class _FunctionDelta(TypedDict, total=False):
    name: str | None
    arguments: str | None


class _ToolCallDelta(TypedDict, total=False):
    index: int | None
    id: str | None
    function: _FunctionDelta | None


class _Delta(TypedDict, total=False):
    content: Content
    tool_calls: list[_ToolCallDelta] | None


class _ChunkChoice(TypedDict, total=False):
    delta: _Delta | None
    finish_reason: str | None


class WireChunk(TypedDict, total=False):
    id: str | None
    model: str | None
    system_fingerprint: str | None
    usage: WireUsage | None
    choices: list[_ChunkChoice] | None
    error: Any


COMPLETION: TypeAdapter[WireCompletion] = TypeAdapter(WireCompletion)
CHUNK: TypeAdapter[WireChunk] = TypeAdapter(WireChunk)
_PASSED_ON = ("id", "system_fingerprint", "service_tier")


def passed_on(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a reply that ``ModelResponse.raw`` keeps."""
    return {key: reply[key] for key in _PASSED_ON if reply.get(key) is not None}


def to_usage(usage: WireUsage) -> Usage:
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=prompt.get("cached_tokens") or 0,
        cache_write_tokens=prompt.get("cache_write_tokens") or 0,
        reasoning_tokens=completion.get("reasoning_tokens") or 0,
    )


# -- errors --------------------------------------------------------------------------------------------


def malformed(provider_id: str, what: str, exc: ValidationError, raw: bytes) -> ProviderMalformed:
    """``exc`` as the error of a reply (``what``: "a completion", "a stream chunk") that did not validate."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    if first["type"] == "json_invalid":
        try:
            raw.decode()
        except UnicodeDecodeError as bad:
            return ProviderMalformed(
                f"The upstream '{provider_id}' sent {what} that is not valid UTF-8 ({bad.reason})."
            )
        detail = str(first["msg"]).removeprefix("Invalid JSON: ")
        return ProviderMalformed(f"The upstream '{provider_id}' sent {what} that is not JSON ({detail}).")
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    path = format_loc(tuple(first["loc"])) or "(root)"
    return ProviderMalformed(
        f"The upstream '{provider_id}' sent {what} of the wrong shape: {path}: {first['msg']}{more}"
    )


def reported_error(
    provider_id: str, error: Any, secrets: Redactor, *, mid_stream: bool
) -> ProviderUnavailable:
    """The upstream's own ``error`` object, sent with a 200 (its message scrubbed and cut short)."""
    message = error.get("message") if isinstance(error, dict) else error
    text = secrets.redact(message if isinstance(message, str) else "(no message)").strip()[:MAX_ERROR_SNIPPET]
    when = " mid-stream" if mid_stream else ""
    return ProviderUnavailable(f"The upstream '{provider_id}' failed{when}: {text}")


def _body(content_type: str) -> str:
    """How an error names a body that should have been a completion: by its type unless JSON."""
    kind = content_type.partition(";")[0].strip()
    return "a body" if kind in ("", "application/json") else f"a {kind} body"


# -- one completion --------------------------------------------------------------------------------------


def parse_completion(
    raw: bytes, provider_id: str, secrets: Redactor, content_type: str = ""
) -> ModelResponse:
    """A whole ``chat.completion`` body (the bytes received, under ``content_type``) as a response."""
    try:
        data = COMPLETION.validate_json(raw)
    except ValidationError as exc:
        raise malformed(provider_id, _body(content_type), exc, raw) from None
    choices = data.get("choices")
    if not choices:
        if data.get("error") is not None:
            raise reported_error(provider_id, data["error"], secrets, mid_stream=False)
        raise ProviderMalformed(f"The upstream '{provider_id}' sent a completion without choices.")
    choice = choices[0]
    message = choice["message"]
    calls = [
        FunctionCall(
            call_id=c.get("id") or f"call_{i}",
            name=c["function"]["name"],
            arguments=c["function"].get("arguments") or "",
        )
        for i, c in enumerate(message.get("tool_calls") or ())
    ]
    usage = data.get("usage")
    return ModelResponse(
        text=content_text(message.get("content")),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
        usage=to_usage(usage) if usage else Usage(),
        model=data.get("model") or "",
        raw=passed_on(data),
    )


def completion_events(response: ModelResponse) -> list[StreamEvent]:
    """A whole response as the events of a stream that sent it in one piece."""
    events: list[StreamEvent] = [TextDelta(response.text)] if response.text else []
    events += [
        ToolCallDelta(index=i, call_id=c.call_id, name=c.name, arguments=c.arguments)
        for i, c in enumerate(response.tool_calls)
    ]
    events.append(StreamDone(response))
    return events


# -- a stream of chunks --------------------------------------------------------------------------------


class ChunkAssembler:
    """Turns the lines of a ``text/event-stream`` of chunks into deltas and, at the end, one response."""

    def __init__(self, provider_id: str, secrets: Redactor) -> None:
        self.provider_id = provider_id
        self.secrets = secrets
        self.text: list[str] = []
        self.calls: dict[int, FunctionCall] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.model = ""
        self.raw: dict[str, Any] = {}
        self.saw_content = False
        self.chunks = 0

    def feed(self, line: bytes) -> list[StreamEvent]:
        """One line of the stream (without its line ending): the deltas its chunk carries."""
        if not line.startswith(b"data:"):
            return []  # comments, ``event:``/``id:`` fields and the blank lines between events
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return []
        try:
            chunk = CHUNK.validate_json(payload)
        except ValidationError as exc:
            raise malformed(self.provider_id, "a stream chunk", exc, payload) from None
        self.chunks += 1
        choices = chunk.get("choices")
        if not choices and chunk.get("error") is not None:
            raise reported_error(self.provider_id, chunk["error"], self.secrets, mid_stream=True)
        if usage := chunk.get("usage"):
            self.usage = to_usage(usage)
        if model := chunk.get("model"):
            self.model = model
        self.raw.update(passed_on(chunk))
        events: list[StreamEvent] = []
        for choice in choices or ():
            delta = choice.get("delta")
            if delta:
                if content := content_text(delta.get("content")):
                    self.text.append(content)
                    self.saw_content = True
                    events.append(TextDelta(content))
                for tc in delta.get("tool_calls") or ():
                    events.append(self._tool_delta(tc))
            if finish := choice.get("finish_reason"):
                self.finish_reason = finish
        return events

    def _tool_delta(self, tc: _ToolCallDelta) -> ToolCallDelta:
        index = tc.get("index")
        if index is None:
            index = len(self.calls)
        fn = tc.get("function") or {}
        call_id, name, args = tc.get("id"), fn.get("name"), fn.get("arguments") or ""
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = FunctionCall(call_id=call_id or f"call_{index}", name="", arguments="")
        if call_id:
            call.call_id = call_id
        if name:
            call.name += name
        call.arguments += args
        return ToolCallDelta(index=index, call_id=call_id, name=name, arguments=args)

    def finish(self) -> ModelResponse:
        """The whole response, once the stream ended; a stream that carried no chunk is malformed."""
        if not self.chunks:
            raise ProviderMalformed(
                f"The upstream '{self.provider_id}' sent an event stream with no chunk in it."
            )
        calls = [self.calls[i] for i in sorted(self.calls)]
        return ModelResponse(
            text="".join(self.text) if self.saw_content else None,
            tool_calls=calls,
            finish_reason=self.finish_reason or ("tool_calls" if calls else "stop"),
            usage=self.usage,
            model=self.model,
            raw=self.raw,
        )
