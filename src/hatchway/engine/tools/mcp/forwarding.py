"""Which client request headers may be forwarded to an MCP server, and resolving them for one call."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hatchway.config.headers import HEADER_NAME, NEVER_FORWARDED
from hatchway.errors import InvalidRequest


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
        if key in NEVER_FORWARDED or not HEADER_NAME.match(key):
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
