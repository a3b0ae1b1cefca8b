"""Finding an MCP server's OAuth token endpoint the way the MCP authorization spec describes.

1. Ask the server without credentials; a 401 names its Protected Resource Metadata in
   ``WWW-Authenticate: Bearer resource_metadata="…"`` (RFC 9728 §5.1). Without one, try the
   well-known URIs: ``/.well-known/oauth-protected-resource`` with the server's path inserted,
   then at the root.
2. The metadata lists ``authorization_servers``; the first one's Authorization Server Metadata
   (RFC 8414, then OpenID Connect Discovery, with the same path-insertion rules) gives
   ``issuer`` and ``token_endpoint``.

The URL lists and the challenge's parsing are the MCP SDK's (``mcp.client.auth.utils``, the SEP-985
order: the advertised URL, then the path-inserted and root well-known URIs); the requests are ours,
to cap bodies and refuse a non-https hop, and the metadata is read leniently (a client-credentials
server need not publish an ``authorization_endpoint``, which the SDK's ``OAuthMetadata`` requires).

Used by ``hatchway mcp probe`` when it is given a client id but no token URL, and printed so the
operator can write ``token_url`` into the plugin: the gateway itself never follows metadata it
was not configured with. Every URL met must be https (or http on loopback); bodies are capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    extract_resource_metadata_from_www_auth,
)

from hatchway import __version__
from hatchway.config.token_endpoints import token_url_problem
from hatchway.errors import McpAuthError

MAX_METADATA_BODY = 64 * 1024
_PROBE_BODY = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "hatchway-discovery", "version": __version__},
    },
}


@dataclass(frozen=True, slots=True)
class AuthorizationServer:
    """What discovery found: where to get a token, and who issues it."""

    issuer: str
    token_endpoint: str
    auth_methods: tuple[str, ...]
    """``token_endpoint_auth_methods_supported`` (empty when the server does not say)."""
    resource: str | None = None
    """The protected resource's identifier from its metadata."""


async def discover_authorization_server(url: str, *, client: httpx.AsyncClient) -> AuthorizationServer:
    """Follow the server's metadata to its token endpoint; McpAuthError saying where it stopped."""
    resource = await _protected_resource(url, client)
    servers = resource.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise McpAuthError(f"{url}: its protected resource metadata names no authorization_servers")
    issuer = servers[0]
    metadata = await _first_json(
        client, build_oauth_authorization_server_metadata_discovery_urls(issuer, url)
    )
    if metadata is None:
        raise McpAuthError(f"{issuer}: no authorization server metadata at its well-known URLs")
    token_endpoint = metadata.get("token_endpoint")
    if not isinstance(token_endpoint, str) or (problem := token_url_problem(token_endpoint)):
        shown = token_endpoint if isinstance(token_endpoint, str) else "none"
        raise McpAuthError(f"{issuer}: unusable token_endpoint {shown} ({problem or 'missing'})")
    methods = metadata.get("token_endpoint_auth_methods_supported")
    return AuthorizationServer(
        issuer=str(metadata.get("issuer") or issuer),
        token_endpoint=token_endpoint,
        auth_methods=tuple(m for m in methods if isinstance(m, str)) if isinstance(methods, list) else (),
        resource=resource.get("resource") if isinstance(resource.get("resource"), str) else None,
    )


async def _protected_resource(url: str, client: httpx.AsyncClient) -> dict[str, Any]:
    advertised = await _advertised_metadata(url, client)
    candidates = build_protected_resource_metadata_discovery_urls(advertised, url)
    metadata = await _first_json(client, candidates)
    if metadata is None:
        raise McpAuthError(
            f"{url}: found no OAuth protected resource metadata (tried {', '.join(candidates)}); "
            "pass --oauth-token-url"
        )
    return metadata


async def _advertised_metadata(url: str, client: httpx.AsyncClient) -> str | None:
    """The ``resource_metadata`` URL of the server's 401 challenge, if it sends one."""
    try:
        response = await client.post(
            url,
            json=_PROBE_BODY,
            headers={"Accept": "application/json, text/event-stream"},
        )
    except httpx.TransportError as exc:
        raise McpAuthError(
            f"{url}: cannot reach the server ({type(exc).__name__})", code="mcp_unreachable"
        ) from None
    await response.aclose()
    if response.status_code != 401:
        return None
    # The SDK's helper types an httpx2 response; it reads only the headers, which httpx's match.
    advertised = extract_resource_metadata_from_www_auth(response)  # type: ignore[arg-type]
    return advertised if advertised and _url_problem(advertised) is None else None


async def _first_json(client: httpx.AsyncClient, urls: list[str]) -> dict[str, Any] | None:
    for url in urls:
        if _url_problem(url) is not None:
            continue
        data = await _get_json(client, url)
        if data is not None:
            return data
    return None


async def _get_json(client: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    try:
        async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                return None
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_METADATA_BODY:
                    return None
    except httpx.TransportError:
        return None
    try:
        data = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _url_problem(url: str) -> str | None:
    # The same rule as token endpoints: metadata steers where credentials go, so https or loopback.
    return token_url_problem(url)
