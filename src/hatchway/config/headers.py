"""Which request headers a plugin may list in ``forward_headers``, and which are never forwarded —
the rule the plugin's validation and the MCP client's forwarding share."""

from __future__ import annotations

import re
from collections.abc import Iterable

NEVER_FORWARDED = frozenset(
    {
        # credentials of the gateway's own caller: a Hatchway key must never reach a tool server
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-hatchway-user-token",  # an end user's proof of identity (access/end_users.py): ours only
        "x-csrf-token",  # a signed-in person's session token (access/people.py): ours only
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

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def forward_header_problem(name: str) -> str | None:
    """Why ``name`` cannot be listed as a forwarded header, or None when it can. A name in
    ``NEVER_FORWARDED`` may be listed (Floopy plugins do: the seed says such headers are simply never
    forwarded): it is dropped, and ``never_forwarded`` says so."""
    if not HEADER_NAME.match(name):
        return f"not a valid header name (got {name!r})"
    return None


def never_forwarded(names: Iterable[str]) -> list[str]:
    """The listed names that are dropped instead of forwarded, lower-cased."""
    return [name.lower() for name in names if name.lower() in NEVER_FORWARDED]
