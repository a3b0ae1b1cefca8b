"""The JSON a tool call exchanges with the model: its arguments in, a structured error out.

Every toolset reads arguments with ``parse_arguments`` and reports a failure with ``error_body``,
so the model sees one shape whatever failed: ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

TRUNCATION_MARKER = "\n…[truncated {n} characters]"
_MARKED = re.compile(r"\n…\[truncated \d+ characters\]")


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """A call's arguments as an object (empty for none); None when they are not a JSON object."""
    if isinstance(raw, dict):
        return raw
    if raw is None or not raw.strip():
        return {}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def fit_output(output: str, limit: int) -> str:
    """``output`` cut to ``limit`` characters with a marker saying how much was cut; an output already
    cut to this limit (a cached one) is returned as it is."""
    if len(output) <= limit or _MARKED.fullmatch(output, limit):
        return output
    return output[:limit] + TRUNCATION_MARKER.format(n=len(output) - limit)


def error_body(code: str, message: str) -> str:
    """The structured error a model reads in place of a tool's result."""
    return orjson.dumps({"error": {"code": code, "message": message}}).decode()


def is_error_body(output: str) -> bool:
    """Whether ``output`` is an ``error_body`` (the loop's own refusals and time-outs are)."""
    try:
        body = orjson.loads(output)
    except orjson.JSONDecodeError:
        return False
    return isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], dict)


CONNECT_INTRO = "To continue, connect your account (the link works once and expires):\n"
"""How ``connect_message`` begins (A2A reads a run that ended on it as ``auth-required``)."""


def connect_message(links: dict[str, str]) -> str:
    """What the end user reads when a server needs their authorization first."""
    lines = [f"- {server}: {link}" for server, link in sorted(links.items())]
    return CONNECT_INTRO + "\n".join(lines) + "\nThen send your request again."
