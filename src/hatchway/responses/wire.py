"""``POST /v1/responses`` bodies in, Response objects out (shapes of the official SDK's types)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from hatchway.engine.items import ToolSpec, Usage
from hatchway.errors import InvalidRequest
from hatchway.ids import new_id
from hatchway.responses.items import output_text, wire_items
from hatchway.responses.store import ResponseRecord

# Parameters that clients (the OpenAI Agents SDK among them) send and that have no effect here.
_ACCEPTED_AND_IGNORED = {
    "include",
    "reasoning",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "stream_options",
    "top_logprobs",
}
_MAX_ITEMS = 2048


def document_extras(schema: dict[str, Any], rules: dict[str, Any], accepted: set[str]) -> None:
    """The served schema of a request model that reads ``extra="allow"`` only to refuse unknown
    fields by name: the accepted-and-ignored fields listed, everything else documented as refused,
    and the cross-field ``rules`` of its validator."""
    schema.setdefault("properties", {}).update({name: {} for name in sorted(accepted)})
    schema["additionalProperties"] = False
    schema.update(rules)


_UNSTORED = {"required": ["store"], "properties": {"store": {"const": False}}}
INPUT_OR_PREVIOUS: dict[str, Any] = {
    "anyOf": [
        {"required": ["input"], "properties": {"input": {"anyOf": [{"minLength": 1}, {"type": "array"}]}}},
        {"required": ["previous_response_id"], "properties": {"previous_response_id": {"type": "string"}}},
    ],
    "not": {
        "anyOf": [
            {
                **_UNSTORED,
                "required": ["store", "previous_response_id"],
                "properties": {**_UNSTORED["properties"], "previous_response_id": {"type": "string"}},
            },
            {
                **_UNSTORED,
                "required": ["store", "background"],
                "properties": {**_UNSTORED["properties"], "background": {"const": True}},
            },
        ]
    },
}
"""What ``_consistent`` checks of ``input``, ``store`` and ``background``, in the served OpenAPI
document."""


class FunctionToolParam(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description or "",
            parameters=self.parameters or {"type": "object", "properties": {}},
            strict=self.strict,
        )


class ToolChoiceFunctionParam(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1)]


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: TextFormat = Field(default_factory=TextFormat)


class CreateResponseRequest(BaseModel):
    """The parameters Hatchway understands; unknown ones are refused with their name."""

    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        json_schema_extra=lambda s: document_extras(s, INPUT_OR_PREVIOUS, _ACCEPTED_AND_IGNORED),
    )

    model: Annotated[str, Field(min_length=1)]
    input: str | Annotated[list[Any], Field(max_length=_MAX_ITEMS)] = ""
    instructions: str | None = None
    tools: list[FunctionToolParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunctionParam | None = None
    parallel_tool_calls: StrictBool | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    store: StrictBool | None = True
    background: StrictBool | None = False
    stream: StrictBool | None = False
    previous_response_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    metadata: dict[str, Annotated[str, Field(max_length=512)]] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    user: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    text: TextConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CreateResponseRequest:
        unknown = sorted(set(self.model_extra or {}) - _ACCEPTED_AND_IGNORED)
        if unknown:
            raise ValueError(f"{unknown[0]}: unsupported parameter")
        if self.metadata is not None and len(self.metadata) > 16:
            raise ValueError("metadata: at most 16 keys")
        if self.store is False and self.previous_response_id:
            raise ValueError(
                "previous_response_id: cannot be used with store: false (the chain would not be stored); "
                "send store: true or pass the whole conversation as input"
            )
        if self.store is False and self.background:
            raise ValueError("background: background responses must be stored; remove store: false")
        if isinstance(self.input, str) and not self.input and not self.previous_response_id:
            raise ValueError("input: must be a non-empty string or array of items")
        if isinstance(self.tool_choice, ToolChoiceFunctionParam):
            if self.tool_choice.name not in {t.name for t in self.tools or []}:
                raise ValueError(
                    f"tool_choice.name: no function tool named {self.tool_choice.name!r} in tools"
                )
        names = [t.name for t in self.tools or []]
        if len(names) != len(set(names)):
            raise ValueError("tools: function tool names must be unique")
        return self

    def client_tools(self) -> list[ToolSpec]:
        return [t.spec() for t in self.tools or []]

    def upstream_tool_choice(self) -> Any:
        """``tool_choice`` in the Chat Completions form the providers speak."""
        if isinstance(self.tool_choice, ToolChoiceFunctionParam):
            return {"type": "function", "function": {"name": self.tool_choice.name}}
        return self.tool_choice

    def upstream_params(self) -> dict[str, Any]:
        """Sampling parameters for the provider (``max_output_tokens`` becomes ``max_tokens``)."""
        params: dict[str, Any] = {}
        if self.max_output_tokens is not None:
            params["max_tokens"] = self.max_output_tokens
        for name in ("temperature", "top_p", "user"):
            value = getattr(self, name)
            if value is not None:
                params[name] = value
        fmt = self.text.format if self.text else None
        if fmt is not None and fmt.type == "json_object":
            params["response_format"] = {"type": "json_object"}
        elif fmt is not None and fmt.type == "json_schema":
            schema: dict[str, Any] = {"name": fmt.name or "output", "schema": fmt.schema_ or {}}
            if fmt.strict is not None:
                schema["strict"] = fmt.strict
            params["response_format"] = {"type": "json_schema", "json_schema": schema}
        return params

    def echoed(self) -> dict[str, Any]:
        """The request parameters a Response object repeats back."""
        return {
            "instructions": self.instructions,
            "tools": [_tool_dict(t) for t in self.tools or []],
            "tool_choice": self.tool_choice.model_dump()
            if isinstance(self.tool_choice, ToolChoiceFunctionParam)
            else (self.tool_choice or "auto"),
            "parallel_tool_calls": True if self.parallel_tool_calls is None else self.parallel_tool_calls,
            "max_tool_calls": self.max_tool_calls,
            "metadata": self.metadata or {},
            "max_output_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "user": self.user,
            "store": self.store is not False,
            "truncation": self.truncation or "disabled",
            "text": {"format": self.text.format.model_dump(by_alias=True, exclude_none=True)}
            if self.text
            else {"format": {"type": "text"}},
        }


def _tool_dict(tool: FunctionToolParam) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters or {"type": "object", "properties": {}},
        "strict": True if tool.strict is None else tool.strict,
    }


def usage_object(usage: Usage) -> dict[str, Any]:
    """A run's usage as the Responses API reports it."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_object(record: ResponseRecord, output: list[dict[str, Any]]) -> dict[str, Any]:
    """The Response object of a record and its stored output records."""
    request = record.request or {}
    body: dict[str, Any] = {
        "id": record.id,
        "object": "response",
        "created_at": int(record.created_at.timestamp()),
        "status": record.status,
        "background": record.background,
        "completed_at": int(record.completed_at.timestamp()) if record.completed_at else None,
        "error": record.error,
        "incomplete_details": record.incomplete_details,
        "model": record.model,
        "output": wire_items(output),
        "output_text": output_text(output),
        "previous_response_id": record.previous_response_id,
        "usage": record.usage,
        **{key: request.get(key) for key in _ECHOED_KEYS},
    }
    body["tools"] = body["tools"] or []
    body["metadata"] = body["metadata"] or {}
    body["tool_choice"] = body["tool_choice"] or "auto"
    body["parallel_tool_calls"] = bool(body["parallel_tool_calls"])
    for key, default in _SPEC_DEFAULTS.items():  # the Open Responses schema requires each of these
        if body.get(key) is None:
            body[key] = default
    if record.parent_response_id:
        body["parent_response_id"] = record.parent_response_id
        body["call_id"] = record.call_id
    return body


_SPEC_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "truncation": "disabled",
    "text": {"format": {"type": "text"}},
    "service_tier": "default",
    "reasoning": None,
    "safety_identifier": None,
    "prompt_cache_key": None,
}
"""Values reported when the request left a parameter to the upstream's default (OpenAI's defaults)."""

_ECHOED_KEYS = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tool_calls",
    "metadata",
    "max_output_tokens",
    "temperature",
    "top_p",
    "user",
    "store",
    "truncation",
    "text",
)


# -- input ---------------------------------------------------------------------------------------


def parse_input(value: str | list[Any]) -> list[dict[str, Any]]:
    """The request's ``input`` as stored records, with a field path in every error."""
    if isinstance(value, str):
        return [{"type": "message", "id": new_id("msg"), "role": "user", "content": value}] if value else []
    records: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        records.extend(_parse_item(raw, f"input[{i}]"))
    return records


def _fail(path: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{path}: {message}", param=path)


def _string(raw: dict[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value and key != "arguments"):
        raise _fail(f"{path}.{key}", "must be a non-empty string")
    return value


def _item_id(raw: dict[str, Any], path: str, prefix: str) -> str:
    value = raw.get("id")
    if value is None:
        return new_id(prefix)
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        raise _fail(f"{path}.id", "must be a string of at most 64 characters")
    return value


def _parse_item(raw: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(raw, dict):
        raise _fail(path, "each input item must be an object")
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind == "message":
        return [_parse_message(raw, path)]
    if kind == "function_call":
        return [
            {
                "type": "function_call",
                "id": _item_id(raw, path, "fc"),
                "call_id": _string(raw, "call_id", path),
                "name": _string(raw, "name", path),
                "arguments": _string(raw, "arguments", path),
            }
        ]
    if kind == "function_call_output":
        return [
            {
                "type": "function_call_output",
                "id": _item_id(raw, path, "fco"),
                "call_id": _string(raw, "call_id", path),
                "output": _output_text(raw.get("output"), f"{path}.output"),
            }
        ]
    if kind == "mcp_call":
        return _parse_mcp_call(raw, path)
    if kind == "compaction":
        encrypted = _string(raw, "encrypted_content", path)
        return [{"type": "compaction", "id": _item_id(raw, path, "cmp"), "encrypted_content": encrypted}]
    raise _fail(
        f"{path}.type",
        f"unsupported input item type {kind!r} "
        "(message, function_call, function_call_output, mcp_call or compaction)",
    )


def _parse_message(raw: dict[str, Any], path: str) -> dict[str, Any]:
    role = raw.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise _fail(f"{path}.role", f"must be user, system, developer or assistant (got {role!r})")
    content = raw.get("content")
    if isinstance(content, str):
        parsed: str | list[dict[str, Any]] = content
    elif isinstance(content, list):
        parsed = [_parse_part(p, f"{path}.content[{j}]", role) for j, p in enumerate(content)]
    else:
        raise _fail(f"{path}.content", "must be a string or an array of content parts")
    return {"type": "message", "id": _item_id(raw, path, "msg"), "role": role, "content": parsed}


def _parse_part(part: Any, path: str, role: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise _fail(path, "each content part must be an object")
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {
            "type": "input_text" if role != "assistant" else "output_text",
            "text": _string(part, "text", path),
        }
    if kind == "refusal" and role == "assistant":
        return {"type": "output_text", "text": _string(part, "refusal", path)}
    if kind == "input_image" and role != "assistant":
        url = part.get("image_url") or part.get("file_id")
        if not isinstance(url, str) or not url:
            raise _fail(f"{path}.image_url", "an input_image needs image_url (a URL or data URL)")
        detail = part.get("detail") or "auto"
        if detail not in ("low", "high", "auto", "original"):
            raise _fail(f"{path}.detail", "must be low, high, auto or original")
        return {"type": "input_image", "image_url": url, "detail": detail}
    if kind == "input_file" and role != "assistant":
        return _parse_file(part, path)
    raise _fail(f"{path}.type", f"unsupported content part {kind!r} for role {role}")


_FILE_FIELDS = ("file_data", "file_id", "file_url")


def _parse_file(part: dict[str, Any], path: str) -> dict[str, Any]:
    """An ``input_file`` part: inline ``file_data`` (a data URL), a ``file_id`` or a ``file_url``."""
    given = {key: part[key] for key in _FILE_FIELDS if part.get(key) is not None}
    if len(given) != 1 or not all(isinstance(v, str) and v for v in given.values()):
        raise _fail(path, "an input_file needs exactly one of file_data, file_id or file_url (a string)")
    filename = _string(part, "filename", path, required=False)
    return {"type": "input_file", **given, **({"filename": filename} if filename else {})}


def _output_text(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
                raise _fail(f"{path}[{j}]", "only text parts are supported in a function_call_output")
            texts.append(_string(part, "text", f"{path}[{j}]") or "")
        return "".join(texts)
    raise _fail(path, "must be a string or an array of input_text parts")


def _parse_mcp_call(raw: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """A hosted call replayed by a client that keeps its own history (no previous_response_id)."""
    item_id = _item_id(raw, path, "mcp")
    output = raw.get("output")
    error = raw.get("error")
    text = output if isinstance(output, str) else ("" if error is None else str(error))
    call = {
        "type": "function_call",
        "id": item_id,
        "call_id": item_id,
        "name": _string(raw, "name", path),
        "arguments": _string(raw, "arguments", path),
        "hosted": True,
        "server_label": raw.get("server_label") or "hatchway",
    }
    result = {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": item_id,
        "output": text,
        "hosted": True,
        "is_error": error is not None,
    }
    return [call, result]
