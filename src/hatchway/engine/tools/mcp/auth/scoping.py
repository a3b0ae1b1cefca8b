"""Which hosts a secret travels to, and whether an untrusted (inline) plugin may send it there.

A plugin that arrives in a request header is written by whoever holds an API key, so the secrets
it names may only go to hosts the secret's owner listed in ``allowed_hosts``. For ``oauth`` both
hosts count: the client secret goes to the ``token_url`` host, and the access token minted from it
goes to the MCP server's host — listing only the identity provider would let an inline plugin
hand a working token to a server of its choosing. Plugins from hatchway.yaml are trusted.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from hatchway.errors import PermissionDenied
from hatchway.vault.store import Secret


def host_of(url: str | None) -> str | None:
    """The lower-cased host of ``url``, or None (stdio servers have no URL)."""
    if not url:
        return None
    host = urlsplit(url).hostname
    return host.lower().rstrip(".") if host else None


def destination_hosts(server: Any) -> list[tuple[str, str | None]]:
    """``(role, host)`` pairs the server's secret reaches: the server, and for oauth the token endpoint."""
    auth = server.auth
    hosts: list[tuple[str, str | None]] = []
    if auth.type == "oauth":
        hosts.append(("token_url", host_of(auth.token_url)))
    hosts.append(("url", host_of(getattr(server, "url", None))))
    return hosts


def check_scope(secret: Secret, server: Any) -> None:
    """PermissionDenied (403) naming the secret and the host unless every destination is allowed."""
    allowed = set(secret.allowed_hosts)
    for role, host in destination_hosts(server):
        if host is None:
            raise PermissionDenied(
                f"secret '{secret.name}' cannot be used by MCP server '{server.id}' of a plugin sent in "
                f"the request: the server has no {role} host to check against the secret's allowed_hosts",
                code="secret_host_not_allowed",
            )
        if host not in allowed:
            listed = ", ".join(secret.allowed_hosts) or "none"
            raise PermissionDenied(
                f"secret '{secret.name}' may not be sent to host '{host}' (MCP server '{server.id}', "
                f"{role}) by a plugin sent in the request; the secret's allowed_hosts: {listed}. "
                f"Add the host with `hatchway secrets set {secret.name} --org <org> --allowed-host "
                f"{host}` or declare the plugin in hatchway.yaml",
                code="secret_host_not_allowed",
            )
