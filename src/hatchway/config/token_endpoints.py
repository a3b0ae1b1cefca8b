"""What a plugin's OAuth token endpoint may be, and how the client authenticates there — the rule the
plugin's validation and the credentials' exchange share."""

from __future__ import annotations

import ipaddress
from typing import Literal, get_args
from urllib.parse import urlsplit

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
