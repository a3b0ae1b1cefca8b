"""What a tool may ask the end user, how the question reads, and how the reply becomes the answer.

A server's elicitation asks for a requested schema; only what MCP allows for elicitation is asked
(``check_requested_schema``: a flat object of primitive fields with the spec's few keywords), so
the answer is checked here by hand (``_check_answer``), with no regex and no jsonschema, whatever
the server sends. ``answer_from_reply`` reads the user's message — JSON, ``name: value`` lines,
plain text for a one-field question, yes/no for a boolean, ``cancel`` — applies the defaults and
checks it; ``UnreadableAnswer`` says why a reply does not answer.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from hatchway.engine.tools.operations.confirmation import ReplyKind, classify_reply, normalize
from hatchway.errors import ToolError

_DECLINE = frozenset({"cancel", "cancelar", "cancele", "decline", "recusar", "recuso", "no", "nao", "não"})
MAX_QUESTION_FIELDS = 32
MAX_MESSAGE_CHARS = 2000
_PRIMITIVE_KEYS = {
    # What MCP allows in an elicitation's requested schema: a flat object of primitive properties.
    "string": {
        "type",
        "title",
        "description",
        "default",
        "minLength",
        "maxLength",
        "format",
        "enum",
        "enumNames",
    },
    "number": {"type", "title", "description", "default", "minimum", "maximum"},
    "integer": {"type", "title", "description", "default", "minimum", "maximum"},
    "boolean": {"type", "title", "description", "default"},
}


_TOP_KEYS = {"type", "properties", "required", "title", "description", "$schema"}
_SENSITIVE = re.compile(
    # What the MCP specification forbids a server to request by form elicitation: passwords, API keys,
    # access tokens, payment credentials (they belong in URL mode, on the server's own page).
    r"pass(?:word|wd|phrase|code)|senha|contrase|secret|token|api[\s_-]*key|private[\s_-]*key|credential|"
    r"\bpin\b|\botp\b|one[\s_-]*time|card[\s_-]*(?:number|no\b)|credit[\s_-]*card|cart[aã]o|\bcvv|\bcvc|"
    r"security[\s_-]*code|\bssn\b|social[\s_-]*security|\biban\b|routing[\s_-]*number",
    re.I,
)
_SCALAR = (str, int, float, bool)


def check_requested_schema(server_id: str, schema: dict[str, Any]) -> None:
    """Refuse a requested schema outside what MCP allows for elicitation: a flat object of at most
    ``MAX_QUESTION_FIELDS`` string, number, integer or boolean properties with the spec's few
    keywords, each of the right type (no ``pattern``, no combinators, no ``$ref``). The answer is then
    checked by ``_check_answer`` (written here, not jsonschema: a server must not make the check cost
    anything, and a schema this small needs nothing more)."""

    def refuse(reason: str) -> ToolError:
        return ToolError(
            f"{server_id}: the tool's question cannot be asked ({reason})", code="mcp_input_unsupported"
        )

    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise refuse("its schema is not an object")
    extra = set(schema) - _TOP_KEYS
    if extra:
        raise refuse(f"its schema uses {', '.join(sorted(map(str, extra)))[:120]}")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict) or len(properties) > MAX_QUESTION_FIELDS:
        raise refuse(f"it needs a properties object of at most {MAX_QUESTION_FIELDS} fields")
    for name, prop in properties.items():
        if reason := _property_problem(repr(str(name)[:64]), prop):
            raise refuse(reason)
    required = schema.get("required") or []
    if not isinstance(required, list) or not all(isinstance(r, str) and r in properties for r in required):
        raise refuse("its required fields are not among its properties")
    for name, prop in properties.items():
        said = (name, prop.get("title"), prop.get("description"), prop.get("format"))
        words = " ".join(str(v) for v in said if v)
        if _SENSITIVE.search(words):
            raise ToolError(
                f"{server_id}: the tool asked the user for sensitive information ({str(name)[:64]!r}) in a "
                "form, which MCP forbids (it belongs on the server's own page, by URL); not asked",
                code="mcp_input_sensitive",
            )


def _property_problem(label: str, prop: Any) -> str | None:
    """Why one requested field is outside the elicitation subset, or None."""
    kind = prop.get("type") if isinstance(prop, dict) else None
    allowed = _PRIMITIVE_KEYS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        return f"field {label} is not a string, number, integer or boolean"
    unknown = set(prop) - allowed
    if unknown:
        return f"field {label} uses {', '.join(sorted(map(str, unknown)))[:120]}"
    if len(orjson.dumps(prop)) > 4096:
        return f"field {label} is too large"
    for key in ("minLength", "maxLength"):
        if key in prop and (not isinstance(prop[key], int) or isinstance(prop[key], bool)):
            return f"field {label}: {key} is not an integer"
    for key in ("minimum", "maximum"):
        if key in prop and (not isinstance(prop[key], int | float) or isinstance(prop[key], bool)):
            return f"field {label}: {key} is not a number"
    if "enum" in prop and (
        not isinstance(prop["enum"], list) or not all(isinstance(v, _SCALAR) for v in prop["enum"])
    ):
        return f"field {label}: enum is not a list of values"
    if any(key in prop and not isinstance(prop[key], str) for key in ("title", "description", "format")):
        return f"field {label}: title, description and format are text"
    return None


def _check_answer(content: dict[str, Any], schema: dict[str, Any]) -> None:
    """The answer against a schema ``check_requested_schema`` accepted; UnreadableAnswer says why not."""
    properties: dict[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in content:
            raise UnreadableAnswer(f"{name}: required")
    for name, value in content.items():
        prop = properties.get(name)
        if prop is None:
            raise UnreadableAnswer(f"{str(name)[:64]}: not asked for")
        kind = prop["type"]
        ok = {
            "string": isinstance(value, str),
            "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
        }[kind]
        if not ok:
            raise UnreadableAnswer(f"{name}: must be {'an' if kind == 'integer' else 'a'} {kind}")
        if "enum" in prop and value not in prop["enum"]:
            raise UnreadableAnswer(f"{name}: one of {', '.join(map(str, prop['enum']))}")
        if isinstance(value, str):
            if len(value) < prop.get("minLength", 0) or len(value) > prop.get("maxLength", 10_000):
                raise UnreadableAnswer(f"{name}: the length is out of bounds")
        elif kind in ("integer", "number"):
            if value < prop.get("minimum", value) or value > prop.get("maximum", value):
                raise UnreadableAnswer(f"{name}: out of bounds")


def requested_schema(request: Any) -> dict[str, Any]:
    params = request.get("params", {}) if isinstance(request, dict) else getattr(request, "params", None)
    if isinstance(params, dict):
        schema = params.get("requestedSchema") or {}
    else:
        schema = getattr(params, "requested_schema", None) or {}
    return schema if isinstance(schema, dict) else {}


def _message(request: Any) -> str:
    params = request.get("params", {}) if isinstance(request, dict) else getattr(request, "params", None)
    if isinstance(params, dict):
        return str(params.get("message") or "")
    return str(getattr(params, "message", "") or "")


def describe(request: Any) -> str:
    """The question as the end user reads it: the server's message and the fields it wants."""
    schema = requested_schema(request)
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines = [_message(request)[:MAX_MESSAGE_CHARS] or "The tool needs more information."]
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        kind = "one of " + ", ".join(map(str, prop["enum"])) if "enum" in prop else prop.get("type", "text")
        extra = [] if name in required else ["optional"]
        if "default" in prop:
            extra.append(f"default {prop['default']}")
        title = prop.get("title") or prop.get("description") or ""
        detail = f" ({'; '.join(extra)})" if extra else ""
        lines.append(f"- {name}: {kind}{detail}{f' — {title}' if title else ''}")
    if len(properties) > 1:
        lines.append('Answer with "name: value" lines (or JSON), or "cancel".')
    return "\n".join(lines)


class UnreadableAnswer(Exception):
    """The reply does not answer the question; ``reason`` says why (it is asked again)."""


_PAIR = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*[:=]\s*(.*?)\s*$")


def answer_from_reply(text: str, request: dict[str, Any]) -> dict[str, Any]:
    """The ``ElicitResult`` (as JSON) the end user's reply gives; UnreadableAnswer if none."""
    schema = requested_schema(request)
    properties: dict[str, Any] = schema.get("properties") or {}
    if normalize(text) in _DECLINE and not _wants_free_text(properties):
        return {"action": "decline"}
    content = _content(text, properties)
    for name, prop in properties.items():
        if name not in content and isinstance(prop, dict) and "default" in prop:
            content[name] = prop["default"]
    _check_answer(content, schema)
    return {"action": "accept", "content": content}


def _wants_free_text(properties: dict[str, Any]) -> bool:
    return len(properties) == 1 and next(iter(properties.values()), {}).get("type") == "string"


def _content(text: str, properties: dict[str, Any]) -> dict[str, Any]:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            raise UnreadableAnswer("the answer is not valid JSON") from None
        if not isinstance(value, dict):
            raise UnreadableAnswer("the answer must be an object")
        return value
    pairs = [_PAIR.match(line) for line in stripped.splitlines() if line.strip()]
    if pairs and all(pairs) and all(m.group(1) in properties for m in pairs if m):
        return {m.group(1): _coerce(m.group(2), properties[m.group(1)]) for m in pairs if m}
    if len(properties) == 1:
        name, prop = next(iter(properties.items()))
        return {name: _coerce(stripped, prop)}
    raise UnreadableAnswer('answer with "name: value" lines, one per field')


def _coerce(value: str, prop: Any) -> Any:
    kind = prop.get("type") if isinstance(prop, dict) else None
    if kind == "boolean":
        reply = classify_reply(value)
        if reply is ReplyKind.AMBIGUOUS:
            raise UnreadableAnswer("answer yes or no")
        return reply is ReplyKind.YES
    if kind in ("integer", "number"):
        try:
            number = float(value.replace(",", "."))
        except ValueError:
            raise UnreadableAnswer(f"{value!r} is not a number") from None
        return int(number) if kind == "integer" and number.is_integer() else number
    return value
