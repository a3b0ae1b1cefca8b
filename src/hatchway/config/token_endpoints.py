"""What a plugin's OAuth token endpoint may be, how the client authenticates there, and where an
assertion it presents may be read from — the rules the plugin's validation and the credentials'
exchange share."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal, get_args
from urllib.parse import urlsplit

from hatchway.vault.names import ref_problem

ClientAuth = Literal["client_secret_basic", "client_secret_post", "private_key_jwt"]
"""How the client authenticates at the token endpoint (RFC 7591 calls it ``token_endpoint_auth_method``)."""
AUTH_METHODS: tuple[str, ...] = get_args(ClientAuth)


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` or a loopback IP: traffic that never leaves the machine."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a token endpoint (https, or http on loopback; no credentials), or None.

    The one rule for ``auth.token_url``: plugin validation reports it with the field path, and the
    exchange checks it again before any request.
    """
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:  # e.g. a fullwidth "／" in the host, a port past 65535
        return f"is not a valid URL (got {url!r})"
    if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback_host(parts.hostname)):
        return f"must be https (got {url})"
    if not parts.hostname:
        return f"must name a host (got {url})"
    if parts.username or parts.password:
        return "must not carry credentials in the URL; use client_id and secret_ref"
    return None


TOKEN_SOURCE_KINDS = ("secret.", "env:", "file:")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def token_source_problem(ref: str) -> str | None:
    """Why ``ref`` cannot name where an assertion or a subject token is read, or None.

    ``secret.<name>`` (the organisation's vault), ``env:<NAME>`` (an environment variable of the
    gateway) or ``file:<absolute path>`` (re-read at each exchange: a Kubernetes projected service
    account token rotates under the same path). The last two read the gateway's own environment,
    so only plugins from hatchway.yaml may use them (the credentials refuse the others).
    """
    if ref.startswith("secret."):
        return ref_problem(ref)
    if ref.startswith("env:"):
        if not _ENV_NAME.match(ref[4:]):
            return f"an env reference needs a variable name such as env:MCP_ASSERTION (got {ref!r})"
        return None
    if ref.startswith("file:"):
        path = ref[5:]
        if not path.startswith("/") or "\x00" in path:
            example = "file:/var/run/secrets/tokens/mcp"
            return f"a file reference needs an absolute path such as {example} (got {ref!r})"
        return None
    return f"must be secret.<name>, env:<NAME> or file:<absolute path> (got {ref!r})"
