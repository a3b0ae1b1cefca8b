"""Which hosts a secret travels to, and whether an untrusted (inline) plugin may send it there.

A plugin that arrives in a request header is written by whoever holds an API key, so the secrets
it names may only go to hosts the secret's owner listed in ``allowed_hosts``. For ``oauth`` both
hosts count: the client secret goes to the ``token_url`` host, and the access token minted from it
goes to the MCP server's host — listing only the identity provider would let an inline plugin
hand a working token to a server of its choosing. With ``grant: identity_assertion`` the enterprise
IdP's ``idp_token_url`` counts too (the subject token goes there, the ID-JAG it issues goes on).
A destination is a scheme, a host and a port:
a secret allowed on ``mcp.example.com`` (https, 443) is not sent over http, nor to another port.
Plugins from hatchway.yaml are trusted.
"""

from __future__ import annotations

from typing import Any

from hatchway.errors import PermissionDenied
from hatchway.vault.names import Origin, allowed_origin, origin_of
from hatchway.vault.store import Secret


def destination_origins(server: Any) -> list[tuple[str, str | None, Origin | None]]:
    """``(role, url, origin)`` of each place the server's secret reaches: the server, and for oauth
    the token endpoint."""
    auth = server.auth
    urls: list[tuple[str, str | None]] = []
    if auth.type == "oauth":
        urls.append(("token_url", auth.token_url))
        if getattr(auth, "idp_token_url", None) is not None:
            urls.append(("idp_token_url", auth.idp_token_url))
    urls.append(("url", getattr(server, "url", None)))
    return [(role, url, origin_of(url)) for role, url in urls]


def check_scope(secret: Secret, server: Any) -> None:
    """PermissionDenied (403) naming the secret and the destination unless every one is allowed:
    scheme, host and port (a bare ``allowed_hosts`` entry is https on 443)."""
    if getattr(server.auth, "per_user", False):
        raise PermissionDenied(
            f"secret '{secret.name}' cannot be used by MCP server '{server.id}' of a plugin sent in the "
            "request: with grant authorization_code the client secret goes to a token endpoint the "
            "server names at run time, which cannot be checked against the secret's allowed_hosts; "
            "use a public client (no secret_ref) or declare the plugin in hatchway.yaml",
            code="secret_host_not_allowed",
        )
    allowed = {allowed_origin(entry) for entry in secret.allowed_hosts}
    for role, _, origin in destination_origins(server):
        if origin is None:
            raise PermissionDenied(
                f"secret '{secret.name}' cannot be used by MCP server '{server.id}' of a plugin sent in "
                f"the request: the server has no {role} host to check against the secret's allowed_hosts",
                code="secret_host_not_allowed",
            )
        if origin not in allowed:
            scheme, host, port = origin
            listed = ", ".join(secret.allowed_hosts) or "none"
            entry = host if (scheme, port) == ("https", 443) else f"{scheme}://{host}:{port}"
            raise PermissionDenied(
                f"secret '{secret.name}' may not be sent to host '{host}' ({scheme}, port {port}; MCP server "
                f"'{server.id}', {role}) by a plugin sent in the request; the secret's allowed_hosts: "
                f"{listed}. Add it with `hatchway secrets set {secret.name} --org <org> --allowed-host "
                f"{entry}` or declare the plugin in hatchway.yaml",
                code="secret_host_not_allowed",
            )
