"""How deep a JSON value a request may nest: one limit for every surface (``/v1`` bodies, an MCP
endpoint's ``tools/call`` arguments), checked before anything walks the value recursively
(orjson refuses past 255 levels, Python's own recursion past about 1,000)."""

from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 128


def too_deep(data: Any) -> str | None:
    """The field path of the first value nested past MAX_JSON_DEPTH, or None."""
    keys = _deep_keys(data, 1)
    if keys is None:
        return None
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")


def _deep_keys(value: Any, depth: int) -> list[int | str] | None:
    # Depth-first, building the path only on the way back from a value too deep: what it holds is
    # bounded by the nesting limit, however wide the body (a path per child would not be).
    if isinstance(value, dict):
        children: Any = value.items()
    elif isinstance(value, list):
        children = enumerate(value)
    else:
        return None
    if depth > MAX_JSON_DEPTH:
        return []
    for key, child in children:
        if isinstance(child, dict | list) and (rest := _deep_keys(child, depth + 1)) is not None:
            return [key, *rest]
    return None
