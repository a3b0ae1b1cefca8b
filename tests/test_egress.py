"""Egress safety for URLs that come from API callers (inline plugins)."""

from __future__ import annotations

import ipaddress

import pytest

from hatchway.egress import check_egress, forbidden_reason
from hatchway.errors import PermissionDenied

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00:ec2::254", "private"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("fe80::1", "link-local (cloud metadata)"),
        ("100.100.100.200", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::", "link-local (cloud metadata)"),  # 6to4 of 169.254.169.254
        ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
        ("2002:5db8:d822::", None),  # 6to4 of a public address
        ("224.0.0.1", "reserved"),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_forbidden_reasons(address: str, reason: str | None) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/mcp",
        "http://[::1]/mcp",
        "http://169.254.169.254/latest/meta-data/",
        "https://10.0.0.5/mcp",
        "http://localhost:9000/mcp",  # a name: resolved, and every address checked
    ],
)
async def test_private_targets_are_refused(url: str) -> None:
    with pytest.raises(PermissionDenied) as caught:
        await check_egress(url, allow_private=False)
    assert "allow_private_mcp_urls" in caught.value.message
    assert caught.value.status_code == 403


async def test_public_literal_passes_and_allow_private_lets_everything_through() -> None:
    await check_egress("https://93.184.216.34/mcp", allow_private=False)
    await check_egress("http://127.0.0.1:8080/mcp", allow_private=True)


@pytest.mark.parametrize("url", ["ftp://example.com/x", "http:///nohost", "file:///etc/passwd"])
async def test_non_http_urls_are_refused_even_when_private_is_allowed(url: str) -> None:
    with pytest.raises(PermissionDenied):
        await check_egress(url, allow_private=True)


async def test_unresolvable_names_are_refused() -> None:
    with pytest.raises(PermissionDenied) as caught:
        await check_egress("http://no-such-host.invalid/mcp", allow_private=False)
    assert "could not be resolved" in caught.value.message
