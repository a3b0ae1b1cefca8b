"""The token endpoints of untrusted (inline) plugins under the egress rule (``egress.py``): the
request goes to the checked address (TLS still verifies the certificate for the host name, via SNI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hatchway.egress import EgressRefused, public_address
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


async def pin_public_address(url: httpx.URL, *, what: str) -> PinnedAddress:
    """Resolve ``url``'s host under the egress rule (``public_address``); McpAuthError if refused."""
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        address = await public_address(host, port)
    except OSError as exc:
        raise McpAuthError(f"{what}: cannot resolve host '{host}' ({exc.strerror or exc})") from None
    except EgressRefused as refused:
        raise McpAuthError(
            f"{what}: host '{host}' resolves to a non-public address ({refused.address or 'none'}); "
            "plugins sent in a request may only reach public hosts unless hatchway.yaml sets "
            "allow_private_mcp_urls: true",
            code="egress_denied",
        ) from None
    return PinnedAddress(host, str(address))
