"""Which client request headers may be forwarded to an MCP server, and resolving them for one call."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from hatchway.errors import InvalidRequest

NEVER_FORWARDED = frozenset(
    {
        # credentials of the gateway's own caller: a Hatchway key must never reach a tool server
        "authorization",
        "proxy-authorization",
        "cookie",
        # routing and framing: forwarding these would corrupt or redirect the MCP request itself
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "keep-alive",
        "proxy-connection",
        # the MCP transport's own headers: a client must not steer the gateway's session
        "mcp-session-id",
        "mcp-protocol-version",
    }
)
"""Header names never sent to an MCP server, even when a plugin lists them in ``forward_headers``."""

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def forward_header_problem(name: str) -> str | None:
    """Why ``name`` cannot be a forwarded header, or None when it can."""
    if not _TOKEN.match(name):
        return f"not a valid header name (got {name!r})"
    if name.lower() in NEVER_FORWARDED:
        return (
            f"{name!r} is never forwarded (credentials, cookies, host and framing headers stay with the "
            "gateway); remove it"
        )
    return None


def forwarded_headers(names: Iterable[str], request_headers: Mapping[str, str]) -> dict[str, str]:
    """The listed headers the client sent, lower-cased; forbidden names are dropped, CR/LF values refused."""
    out: dict[str, str] = {}
    for name in names:
        key = name.lower()
        if key in NEVER_FORWARDED or not _TOKEN.match(key):
            continue
        value = request_headers.get(key)
        if value is None:
            continue
        if "\r" in value or "\n" in value or "\x00" in value:
            raise InvalidRequest(
                f"{name}: header values with CR, LF or NUL are not forwarded to MCP servers", param=name
            )
        out[key] = value
    return out
