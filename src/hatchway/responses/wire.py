"""``POST /v1/responses`` bodies in, Response objects out (shapes of the official SDK's types)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, Tag, model_validator

from hatchway.engine.items import ToolSpec, Usage
from hatchway.errors import InvalidRequest
from hatchway.ids import new_id
from hatchway.responses.items import output_text, wire_items
from hatchway.responses.store import ResponseRecord

_ACCEPTED_AND_IGNORED = {
    "access_programs",
    "background_options",
    "client_metadata",  # not in OpenAI's reference, but Codex CLI always sends it
    "context_management",
    "image",
    "include",
    "moderation",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "stream_options",
    "top_logprobs",
}
"""Request fields the OpenAI Responses API documents (and clients send: Codex CLI, the Agents SDK)
that have no effect here: accepted, and named in the ``x-hatchway-ignored-params`` header when
set. ``tests/api/test_responses_clients_wire.py`` keeps this and the SDK's parameters in step."""

_REFUSED_WHEN_SET = {
    "conversation": "use previous_response_id (stored chains) or send the conversation as input",
    "prompt": "stored prompt templates live at OpenAI; send instructions and input instead",
}
"""Documented fields that would change the answer if honoured and that the gateway cannot honour."""

HOSTED_TOOL_TYPES = frozenset(
    {
        "apply_patch",
        "code_interpreter",
        "computer",
        "computer_use_preview",
        "custom",
        "file_search",
        "image_generation",
        "local_shell",
        "mcp",
        "programmatic_tool_calling",
        "shell",
        "tool_search",
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
    }
)
"""Tool types OpenAI runs itself (or, for ``custom``, freeform tools no Chat Completions upstream
takes): accepted and not offered to the model (``hosted_tools: ignore``, the default, which lets
Codex CLI work), or refused (``hosted_tools: refuse``)."""
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


_TOOL_NAME = r"^[A-Za-z0-9_-]+$"


class FunctionToolParam(BaseModel):
    model_config = ConfigDict(extra="ignore")  # defer_loading, output_schema…: no effect here
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=_TOOL_NAME)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    def spec(self, name: str | None = None) -> ToolSpec:
        return ToolSpec(
            name=name or self.name,
            description=self.description or "",
            parameters=self.parameters or {"type": "object", "properties": {}},
            strict=self.strict,
        )


class HostedToolParam(BaseModel):
    """A tool OpenAI would run itself (``HOSTED_TOOL_TYPES``); its settings are not read."""

    model_config = ConfigDict(extra="allow")
    type: str

    @model_validator(mode="after")
    def _hosted(self) -> HostedToolParam:
        if self.type not in HOSTED_TOOL_TYPES:
            raise ValueError(
                f"unsupported tool type {self.type!r} (function, namespace, or one of OpenAI's hosted "
                f"tools: {', '.join(sorted(HOSTED_TOOL_TYPES))})"
            )
        return self


class NamespaceToolParam(BaseModel):
    """Function tools grouped under a name (Codex CLI sends its MCP tools so). The model sees each
    as ``<namespace>__<name>``; its calls come back as ``function_call`` items with ``name`` and
    ``namespace``, as OpenAI returns them."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["namespace"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=_TOOL_NAME)]
    description: str | None = None
    tools: Annotated[list[FunctionToolParam | HostedToolParam], Field(max_length=512)]


def _tool_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"tagged-union:{kind if kind in ('function', 'namespace') else 'hosted'}"


# The tags start with "tagged-union", which field paths leave out (config.loading.format_loc): an
# error reads ``tools[0].name``, not ``tools[0].function.name``.
AnyToolParam = Annotated[
    Annotated[FunctionToolParam, Tag("tagged-union:function")]
    | Annotated[NamespaceToolParam, Tag("tagged-union:namespace")]
    | Annotated[HostedToolParam, Tag("tagged-union:hosted")],
    Discriminator(_tool_kind),
]


def flat_name(namespace: str, name: str) -> str:
    """The name the model sees for ``name`` in ``namespace`` (at most 64 characters, as providers
    require: a long pair keeps a digest of the whole for uniqueness)."""
    joined = f"{namespace}__{name}"
    if len(joined) <= 64:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:10]
    return f"{namespace[:24]}__{name[:26]}_{digest}"


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
    tools: Annotated[list[AnyToolParam], Field(max_length=1024)] | None = None
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
        unknown = sorted(set(self.model_extra or {}) - _ACCEPTED_AND_IGNORED - set(_REFUSED_WHEN_SET))
        if unknown:
            raise ValueError(f"{unknown[0]}: unsupported parameter")
        for name, instead in _REFUSED_WHEN_SET.items():
            if (self.model_extra or {}).get(name) is not None:
                raise ValueError(f"{name}: not supported by this gateway; {instead}")
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
            if self.tool_choice.name not in {name for name, _, _ in self._functions()}:
                raise ValueError(
                    f"tool_choice.name: no function tool named {self.tool_choice.name!r} in tools"
                )
        names = [name for name, _, _ in self._functions()]
        if len(names) != len(set(names)):
            raise ValueError(
                "tools: function tool names must be unique (a namespace's as <namespace>__<name>)"
            )
        return self

    def _functions(self) -> list[tuple[str, str | None, FunctionToolParam]]:
        """Every function tool: the name the model sees (namespaces flattened), its namespace."""
        out: list[tuple[str, str | None, FunctionToolParam]] = []
        for tool in self.tools or []:
            if isinstance(tool, FunctionToolParam):
                out.append((tool.name, None, tool))
            elif isinstance(tool, NamespaceToolParam):
                out.extend(
                    (flat_name(tool.name, t.name), tool.name, t)
                    for t in tool.tools
                    if isinstance(t, FunctionToolParam)
                )
        return out

    def client_tools(self) -> list[ToolSpec]:
        return [tool.spec(name) for name, _, tool in self._functions()]

    def namespaced(self) -> dict[str, tuple[str, str]]:
        """Flat name → (namespace, name) of every function tool inside a namespace."""
        return {name: (namespace, tool.name) for name, namespace, tool in self._functions() if namespace}

    def hosted_tools(self) -> list[str]:
        """``tools[i]`` paths (with their type) of the tools the gateway does not offer the model."""
        found = []
        for i, tool in enumerate(self.tools or []):
            if isinstance(tool, HostedToolParam):
                found.append(f"tools[{i}]:{tool.type}")
            elif isinstance(tool, NamespaceToolParam):
                found.extend(
                    f"tools[{i}].tools[{j}]:{t.type}"
                    for j, t in enumerate(tool.tools)
                    if isinstance(t, HostedToolParam)
                )
        return found

    def ignored(self) -> list[str]:
        """What the request set that has no effect here (the ``x-hatchway-ignored-params`` header)."""
        extra = self.model_extra or {}
        return [
            *(name for name in sorted(_ACCEPTED_AND_IGNORED) if extra.get(name) is not None),
            *self.hosted_tools(),
        ]

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


def check_hosted_tools(body: CreateResponseRequest, policy: str) -> None:
    """``hosted_tools: refuse``: a tool of a type OpenAI runs itself is a 400 naming it."""
    hosted = body.hosted_tools()
    if policy == "refuse" and hosted:
        path, _, kind = hosted[0].partition(":")
        raise InvalidRequest(
            f"{path}.type: this gateway does not run {kind!r} tools (hosted_tools: refuse)",
            param=f"{path}.type",
            code="unsupported_tool",
        )


_HOSTED_CREDENTIALS = frozenset({"headers", "authorization"})


def _tool_dict(tool: FunctionToolParam | NamespaceToolParam | HostedToolParam) -> dict[str, Any]:
    """A request tool as the Response object echoes it."""
    if isinstance(tool, HostedToolParam):  # not its credentials (a hosted mcp tool's headers)
        return {k: v for k, v in tool.model_dump().items() if k not in _HOSTED_CREDENTIALS}
    if isinstance(tool, NamespaceToolParam):
        tools = [_tool_dict(t) for t in tool.tools]
        return {"type": "namespace", "name": tool.name, "description": tool.description or "", "tools": tools}
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
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
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
        call = {
            "type": "function_call",
            "id": _item_id(raw, path, "fc"),
            "call_id": _string(raw, "call_id", path),
            "name": _string(raw, "name", path),
            "arguments": _string(raw, "arguments", path),
        }
        namespace = _string(raw, "namespace", path, required=False)
        if namespace:
            call.update(namespace=namespace, model_name=flat_name(namespace, call["name"] or ""))
        return [call]
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
    if kind == "item_reference":  # resolved against the organisation's stored items (runs.accept)
        return [{"type": "item_reference", "id": _string(raw, "id", path), "path": path}]
    if kind == "compaction":
        encrypted = _string(raw, "encrypted_content", path)
        return [{"type": "compaction", "id": _item_id(raw, path, "cmp"), "encrypted_content": encrypted}]
    raise _fail(
        f"{path}.type",
        f"unsupported input item type {kind!r} "
        "(message, function_call, function_call_output, mcp_call, item_reference or compaction)",
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
