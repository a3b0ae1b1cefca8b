"""Egress for hosts named by untrusted (inline) plugins: public addresses only, pinned for the connection.

The host is resolved once, every address it resolves to must be public, and the request then goes
to that checked address (TLS still verifies the certificate for the host name, via SNI). Resolving
again at connect time would let a DNS answer that changes between the check and the connection
(DNS rebinding) reach loopback, private or cloud-metadata addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hatchway.engine.tools.mcp.egress import IpAddress, forbidden_reason, resolve_host
from hatchway.errors import McpAuthError

if TYPE_CHECKING:  # only named in annotations; the serving process imports httpx on first use
    import httpx


@dataclass(frozen=True, slots=True)
class PinnedAddress:
    """Where to connect for ``url``: its checked IP, with the original host kept for Host and SNI."""

    host: str
    ip: str

    def apply(self, url: httpx.URL) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
        """The URL aimed at the IP, the Host header and the request extensions (SNI)."""
        host_header = self.host if url.port is None else f"{self.host}:{url.port}"
        return url.copy_with(host=self.ip), {"Host": host_header}, {"sni_hostname": self.host}


def is_public(ip: IpAddress) -> bool:
    """False for loopback, private, link-local (cloud metadata), shared, reserved and multicast.

    The same rule as the MCP connections of inline plugins (``engine/tools/mcp/egress.py``).
    """
    return forbidden_reason(ip) is None


async def pin_public_address(url: httpx.URL, *, what: str) -> PinnedAddress:
    """Resolve ``url``'s host; McpAuthError unless every address is public."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await resolve_host(host, port)
    except OSError as exc:
        raise McpAuthError(f"{what}: cannot resolve host '{host}' ({exc.strerror or exc})") from None
    blocked = [str(a) for a in addresses if not is_public(a)]
    if not addresses or blocked:
        raise McpAuthError(
            f"{what}: host '{host}' resolves to a non-public address ({', '.join(blocked) or 'none'}); "
            "plugins sent in a request may only reach public hosts unless hatchway.yaml sets "
            "allow_private_mcp_urls: true",
            code="egress_denied",
        )
    return PinnedAddress(host, str(addresses[0]))
