"""Egress safety: URLs supplied by callers may not reach the gateway's own network.

Plugins sent inline in a request header are written by API callers, not operators; without this
check one could point an "MCP server" at ``http://169.254.169.254/`` or an internal admin port and
have the gateway make the request. Servers from hatchway.yaml are trusted and not checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from hatchway.errors import PermissionDenied

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata endpoints outside the ranges the ipaddress flags already cover
# (169.254.169.254 is link-local; fd00:ec2::254 is private).
_METADATA_NETWORKS = (
    ipaddress.ip_network("100.64.0.0/10"),  # shared address space: Alibaba Cloud metadata 100.100.100.200
    ipaddress.ip_network("192.0.0.0/24"),  # IETF protocol assignments (Oracle Cloud 192.0.0.192)
)

_ALLOW_HINT = "set allow_private_mcp_urls: true in hatchway.yaml to allow it on a trusted network"


def forbidden_reason(address: IpAddress) -> str | None:
    """Why ``address`` may not be reached by an untrusted URL, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address carried in IPv6 (mapped, 6to4) reaches that IPv4 address.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return forbidden_reason(embedded)
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if address.is_link_local:
        return "link-local (cloud metadata)"
    if any(address in net for net in _METADATA_NETWORKS if net.version == address.version):
        return "metadata"
    if address.is_multicast or address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    return None


async def resolve_host(host: str, port: int) -> list[IpAddress]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]


Resolver = Callable[[str, int], Awaitable[list[IpAddress]]]


class EgressRefused(Exception):
    """``host`` resolved to an address an untrusted caller may not reach (or to none)."""

    def __init__(self, host: str, address: IpAddress | None, reason: str) -> None:
        super().__init__(f"{host} resolves to a {reason} address")
        self.host = host
        self.address = address
        self.reason = reason


async def public_address(host: str, port: int, *, resolver: Resolver = resolve_host) -> IpAddress:
    """The one egress rule for untrusted callers: where ``host`` may be reached, if anywhere.

    The host is resolved once and every address it resolves to is checked: one that is not public is
    enough to refuse (a name with a public and a private record could be steered to either). The
    first address is returned, for the caller to connect to it and nothing else: resolving again at
    connect time would let a DNS answer that changes in between (rebinding) reach inwards. Raises
    EgressRefused, or OSError when the name does not resolve.
    """
    addresses = await resolver(host, port)
    if not addresses:
        raise EgressRefused(host, None, "unresolvable")
    for address in addresses:
        reason = forbidden_reason(address)
        if reason is not None:
            raise EgressRefused(host, address, reason)
    return addresses[0]


async def check_egress(url: str, *, allow_private: bool) -> None:
    """Raise PermissionDenied unless ``url`` may be reached on behalf of an untrusted caller."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:  # characters that normalise into URL syntax, a port past 65535
        raise PermissionDenied(f"{url!r}: not a valid URL", code="egress_denied") from None
    if parts.scheme not in ("http", "https") or not host:
        raise PermissionDenied(f"{url}: only http(s) URLs with a host may be used", code="egress_denied")
    if allow_private:
        return
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        await public_address(host, port)
    except OSError as exc:
        raise PermissionDenied(
            f"{url}: the host {host} could not be resolved ({exc.strerror or exc}), so it cannot be checked",
            code="egress_denied",
        ) from None
    except EgressRefused as refused:
        shown = host if host == str(refused.address) else f"{host} ({refused.address})"
        raise PermissionDenied(
            f"{url}: {shown} is a {refused.reason} address, which plugins sent in a request may not reach; "
            + _ALLOW_HINT,
            code="egress_denied",
        ) from None
