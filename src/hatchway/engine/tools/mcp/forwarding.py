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
    """Why ``name`` cannot be listed as a forwarded header, or None when it can. A name in
    ``NEVER_FORWARDED`` may be listed (Floopy plugins do: the seed says such headers are simply never
    forwarded): it is dropped, and ``never_forwarded`` says so."""
    if not _TOKEN.match(name):
        return f"not a valid header name (got {name!r})"
    return None


def never_forwarded(names: Iterable[str]) -> list[str]:
    """The listed names that are dropped instead of forwarded, lower-cased."""
    return [name.lower() for name in names if name.lower() in NEVER_FORWARDED]


def dropped_headers_header(dropped: Mapping[str, list[str]]) -> dict[str, str]:
    """``x-hatchway-dropped-headers: <server>: <name>, …; …`` when a plugin listed headers that are
    never forwarded; nothing otherwise."""
    if not dropped:
        return {}
    value = "; ".join(f"{server}: {', '.join(names)}" for server, names in dropped.items())
    return {"x-hatchway-dropped-headers": value}


DROPPED_WHY = "never forwarded: credentials, cookies, host and framing headers stay with the gateway"


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
