"""Canonical items ⇄ Google Gemini's ``generateContent`` / ``streamGenerateContent`` (the
Generative Language API's JSON, as ``google-genai`` sends it).

Mapped: system and developer messages → ``systemInstruction``; user turns → ``user`` contents,
assistant turns → ``model`` contents (consecutive ones of a role merged); text, images (``data:``
URLs as ``inlineData``, others as ``fileData``); function calls → ``functionCall`` parts (with their
id), their outputs → ``functionResponse`` parts named after the call they answer (``{"result":
<output>}``); tools → one ``functionDeclarations`` tool, each schema as ``parametersJsonSchema``
(JSON Schema as given); ``tool_choice`` → ``toolConfig.functionCallingConfig``; ``max_tokens``,
``temperature``, ``top_p``, ``top_k``, ``stop``, ``seed`` and a JSON ``response_format`` →
``generationConfig``. Other OpenAI parameters are not sent (docs/providers.md).

Read back: the first candidate's text parts joined (``thought`` parts apart, in
``raw["thinking"]``), its ``functionCall`` parts as function calls (an id made up when Gemini gives
none), ``usageMetadata`` (thoughts counted as output and as reasoning tokens, cached content as
cached tokens), finish reasons as OpenAI's.
"""

from __future__ import annotations

import itertools
from typing import Any, Required
from urllib.parse import quote

import orjson
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from hatchway.engine.items import DATA_URL, FunctionCall, FunctionCallOutput, Item, Message, Usage
from hatchway.engine.providers.base import (
    ModelRequest,
    ModelResponse,
    StreamEvent,
    TextDelta,
    TokenCount,
    ToolCallDelta,
    offered_tools,
    output_limit,
)
from hatchway.engine.providers.chat_replies import malformed

_FILTERED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
_GENERATION = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "seed": "seed",
}
_call_ids = itertools.count(1)


def model_path(model: str, *, stream: bool) -> str:
    """The request's path under ``base_url``: ``/models/<model>:generateContent``."""
    name = quote(model.removeprefix("models/"), safe="-._~")
    return f"/models/{name}:streamGenerateContent?alt=sse" if stream else f"/models/{name}:generateContent"


# -- the request ---------------------------------------------------------------------------------


def _part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"text": part.get("text", "")}
    if kind == "input_image":
        url = str(part.get("image_url") or "")
        match = DATA_URL.match(url)
        if match:
            return {"inlineData": {"mimeType": match["media"], "data": match["data"]}}
        return {"fileData": {"mimeType": "image/*", "fileUri": url}}
    return {k: v for k, v in part.items() if k != "type"}  # a Gemini part sent as it is


def _parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_part(p) for p in content]


def request_contents(items: list[Item]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Items → (system instruction parts, ``contents``)."""
    system: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def turn(role: str, parts: list[dict[str, Any]]) -> None:
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        elif parts:
            contents.append({"role": role, "parts": parts})

    for item in items:
        if isinstance(item, Message):
            if item.role in ("system", "developer"):
                system.extend(_parts(item.content))
            else:
                turn("model" if item.role == "assistant" else "user", _parts(item.content))
        elif isinstance(item, FunctionCall):
            names[item.call_id] = item.name
            turn(
                "model",
                [{"functionCall": {"id": item.call_id, "name": item.name, "args": item.arguments_object()}}],
            )
        elif isinstance(item, FunctionCallOutput):
            answer = {
                "id": item.call_id,
                "name": names.get(item.call_id, ""),
                "response": {"error" if item.is_error else "result": item.output},
            }
            # Its images and documents as parts of the same turn (Gemini takes them beside the answer).
            extra = [
                p for p in item.parts or () if p.get("type") not in ("input_text", "output_text", "text")
            ]
            turn("user", [{"functionResponse": answer}, *(_parts(extra) if extra else [])])
    return system, contents


def _tool_config(choice: Any) -> dict[str, Any] | None:
    if choice == "required":
        return {"functionCallingConfig": {"mode": "ANY"}}
    if choice == "none":
        return {"functionCallingConfig": {"mode": "NONE"}}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    return None


def generate_body(req: ModelRequest) -> dict[str, Any]:
    """The ``generateContent`` body of ``req`` (the same for the streamed call)."""
    system, contents = request_contents(req.items)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": system}
    tools = offered_tools(req)
    if tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
            for t in tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
        config = _tool_config(req.tool_choice)
        if config is not None:
            body["toolConfig"] = config
    generation = {
        wire: req.params[key] for key, wire in _GENERATION.items() if req.params.get(key) is not None
    }
    if (limit := output_limit(req.params)) is not None:
        generation["maxOutputTokens"] = limit
    stop = req.params.get("stop")
    if stop:
        generation["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    fmt = req.params.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"):
        generation["responseMimeType"] = "application/json"
        schema = (fmt.get("json_schema") or {}).get("schema")
        if schema:
            generation["responseJsonSchema"] = schema
    if generation:
        body["generationConfig"] = generation
    return body


# -- the reply -----------------------------------------------------------------------------------


class _Call(TypedDict, total=False):
    id: str | None
    name: Required[str]
    args: dict[str, Any] | None


class _Part(TypedDict, total=False):
    text: str | None
    thought: bool | None
    functionCall: _Call | None


class _Content(TypedDict, total=False):
    parts: list[_Part] | None


class _Candidate(TypedDict, total=False):
    content: _Content | None
    finishReason: str | None


class WireUsage(TypedDict, total=False):
    promptTokenCount: TokenCount | None
    candidatesTokenCount: TokenCount | None
    cachedContentTokenCount: TokenCount | None
    thoughtsTokenCount: TokenCount | None


class WireResponse(TypedDict, total=False):
    candidates: list[_Candidate] | None
    usageMetadata: WireUsage | None
    modelVersion: str | None
    responseId: str | None


_RESPONSE = TypeAdapter(WireResponse)


def usage_of(usage: WireUsage | None) -> Usage:
    usage = usage or {}
    thoughts = usage.get("thoughtsTokenCount") or 0
    return Usage(
        prompt_tokens=usage.get("promptTokenCount") or 0,
        completion_tokens=(usage.get("candidatesTokenCount") or 0) + thoughts,
        cached_tokens=usage.get("cachedContentTokenCount") or 0,
        reasoning_tokens=thoughts,
    )


class ResponseAssembler:
    """One reply, or the chunks of a stream (each a partial reply), → deltas, then the response."""

    def __init__(self, provider_id: str) -> None:
        self.provider_id = provider_id
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[FunctionCall] = []
        self.stop: str | None = None
        self.usage: WireUsage | None = None
        self.model = ""
        self.id = ""

    def feed_json(self, raw: bytes) -> list[StreamEvent]:
        try:
            reply = _RESPONSE.validate_json(raw)
        except ValidationError as exc:
            raise malformed(self.provider_id, "a generateContent reply", exc, raw) from None
        return self._apply(reply)

    def feed(self, line: bytes) -> list[StreamEvent]:
        """One line of the ``alt=sse`` stream."""
        return self.feed_json(line[5:]) if line.startswith(b"data:") else []

    def _apply(self, reply: WireResponse) -> list[StreamEvent]:
        self.usage = reply.get("usageMetadata") or self.usage  # cumulative: the last one counts
        self.model = reply.get("modelVersion") or self.model
        self.id = reply.get("responseId") or self.id
        candidates = reply.get("candidates") or []
        if not candidates:
            return []
        candidate = candidates[0]
        self.stop = candidate.get("finishReason") or self.stop
        events: list[StreamEvent] = []
        for part in (candidate.get("content") or {}).get("parts") or []:
            call = part.get("functionCall")
            if call is not None:
                call_id = call.get("id") or f"call_{next(_call_ids)}"
                arguments = orjson.dumps(call.get("args") or {}).decode()
                events.append(ToolCallDelta(len(self.calls), call_id, call["name"], arguments))
                self.calls.append(FunctionCall(call_id=call_id, name=call["name"], arguments=arguments))
            elif part.get("thought"):
                self.thinking.append(part.get("text") or "")
            elif part.get("text"):
                self.text.append(part["text"] or "")
                events.append(TextDelta(part["text"] or ""))
        return events

    def finish(self) -> ModelResponse:
        if self.stop in _FILTERED:
            finish = "content_filter"
        elif self.stop == "MAX_TOKENS":
            finish = "length"
        else:
            finish = "tool_calls" if self.calls else "stop"
        raw: dict[str, Any] = {"id": self.id} if self.id else {}
        if self.thinking:
            raw["thinking"] = [{"type": "thinking", "thinking": "".join(self.thinking)}]
        return ModelResponse(
            text="".join(self.text) if self.text else None,
            tool_calls=self.calls,
            finish_reason=finish,
            usage=usage_of(self.usage),
            model=self.model,
            raw=raw,
        )
