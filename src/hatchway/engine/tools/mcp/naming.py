"""Names under which MCP tools are shown to the model: ``<server_id>__<tool>``, provider-safe."""

from __future__ import annotations

import hashlib
import re

MAX_TOOL_NAME = 64
"""OpenAI (and most providers) reject function names longer than this."""
SEPARATOR = "__"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 8


def namespaced_name(server_id: str, tool: str) -> str:
    """``<server_id>__<tool>``; when that is too long or has characters providers refuse, it is cut
    and made unique again with a short hash of the full name."""
    full = f"{server_id}{SEPARATOR}{tool}"
    safe = _UNSAFE.sub("_", full)
    if safe == full and len(full) <= MAX_TOOL_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_CHARS]
    return f"{safe[: MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"
