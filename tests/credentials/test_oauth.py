"""OAuth client_credentials against a real token endpoint over TLS (a CA made in the test by trustme)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path

import anyio
import pytest

from hatchway.config.plugin import McpServerConfig
from hatchway.config.token_endpoints import token_url_problem
from hatchway.credentials import VaultCredentials
from hatchway.credentials.egress import PinnedAddress, pin_public_address
from hatchway.credentials.oauth import TokenEndpoint, TokenGrant
from hatchway.egress import forbidden_reason
from hatchway.errors import McpAuthError, PermissionDenied
from hatchway.redaction import Redactor
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault
from tests.support.leak_scanner import SecretScanner
from tests.support.server_configs import requester, server, unchecked_server
from tests.support.token_endpoint import Clock
from tests.support.token_endpoint import TokenEndpoint as TokenServer

pytestmark = pytest.mark.anyio

CLIENT_ID = "hatchway agent+1"  # a space and a '+' check the form-urlencoding of Basic credentials
SECRET_NAME = "mcp_oauth_client_secret"


class CountingCache(MemoryCache):
    """The in-process cache, counting reads (how the test knows every caller is waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    async def get(self, key: str):  # type: ignore[no-untyped-def]
        self.gets += 1
        return await super().get(key)


@dataclass
class Setup:
    endpoint: TokenServer
    vault: Vault
    org: str
    client_secret: str
    server: McpServerConfig
    clock: Clock

    def credentials(self, cache: MemoryCache | None = None, **kwargs) -> VaultCredentials:  # type: ignore[no-untyped-def]
        kwargs.setdefault("verify", self.endpoint.client_tls())
        return VaultCredentials(self.vault, cache or MemoryCache(), clock=self.clock, **kwargs)


@pytest.fixture
async def setup(secret_scanner: SecretScanner, tmp_path: Path, sqlite_db: Database):
    endpoint = TokenServer(tmp_path).start()
    vault = Vault(sqlite_db, MasterKey.generate("test"))
    org = (await OrgStore(sqlite_db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id
    client_secret = f"cs:{uuid.uuid4().hex}/+="  # characters Basic auth must form-encode
    token_host = f"localhost:{endpoint.server.port}"  # https, on the token endpoint's port
    await vault.put(org, SECRET_NAME, client_secret, [token_host, "mcp.example.com"])
    billing = server(
        "billing",
        "https://mcp.example.com/billing",
        type="oauth",
        secret_ref=f"secret.{SECRET_NAME}",
        token_url=endpoint.url,
        client_id=CLIENT_ID,
        scopes=["b.read", "b.write"],
    )
    secret_scanner.watch(client_secret)
    secret_scanner.watch_database(sqlite_db.url)
    yield Setup(endpoint, vault, org, client_secret, billing, Clock())
    endpoint.stop()
    secret_scanner.watch(*endpoint.issued)


async def test_the_client_authenticates_with_basic_credentials_and_gets_a_bearer(setup: Setup) -> None:
    seen = Redactor()
    who = requester(setup.org, seen)

    headers = await setup.credentials().auth_headers(setup.server, who, trusted=True)

    [token] = setup.endpoint.issued
    assert headers == {"Authorization": f"Bearer {token}"}
    [request] = setup.endpoint.requests
    assert request.basic_credentials() == (CLIENT_ID, setup.client_secret)
    assert request.form == {"grant_type": "client_credentials", "scope": "b.read b.write"}
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert {setup.client_secret, token} <= seen.values()


async def test_client_secret_post_sends_the_credentials_in_the_form_instead(setup: Setup) -> None:
    post = server(
        "billing",
        setup.server.url or "",
        type="oauth",
        secret_ref=f"secret.{SECRET_NAME}",
        token_url=setup.endpoint.url,
        client_id=CLIENT_ID,
        token_endpoint_auth_method="client_secret_post",
    )

    await setup.credentials().auth_headers(post, requester(setup.org), trusted=True)

    [request] = setup.endpoint.requests
    assert request.basic_credentials() is None
    assert request.form == {
        "grant_type": "client_credentials",
        "client_id": CLIENT_ID,
        "client_secret": setup.client_secret,
    }


async def test_twenty_concurrent_calls_share_one_token_fetch(setup: Setup) -> None:
    cache = CountingCache()
    creds = setup.credentials(cache)
    setup.endpoint.gate.clear()  # hold the token until every caller is waiting for it

    async def call() -> dict[str, str]:
        return await creds.auth_headers(setup.server, requester(setup.org), trusted=True)

    with anyio.fail_after(20):
        tasks = [asyncio.create_task(call()) for _ in range(20)]
        while cache.gets < 21 or len(setup.endpoint.requests) < 1:  # 20 callers + the fetch's own check
            await asyncio.sleep(0.005)
        setup.endpoint.gate.set()
        results = await asyncio.gather(*tasks)

    assert len(setup.endpoint.requests) == 1
    [token] = setup.endpoint.issued
    assert all(r == {"Authorization": f"Bearer {token}"} for r in results)


async def test_the_token_is_refreshed_within_60_seconds_of_expiry(setup: Setup) -> None:
    creds = setup.credentials()
    who = requester(setup.org)

    first = await creds.auth_headers(setup.server, who, trusted=True)
    setup.clock.now += 3600 - 61
    assert await creds.auth_headers(setup.server, who, trusted=True) == first
    assert len(setup.endpoint.requests) == 1
    setup.clock.now += 2  # now 59 s before expiry
    second = await creds.auth_headers(setup.server, who, trusted=True)

    assert len(setup.endpoint.requests) == 2
    assert second == {"Authorization": f"Bearer {setup.endpoint.issued[1]}"} != first


async def test_a_short_lived_token_is_refreshed_at_half_its_lifetime(setup: Setup) -> None:
    setup.endpoint.expires_in = 30
    creds = setup.credentials()
    who = requester(setup.org)
    await creds.auth_headers(setup.server, who, trusted=True)
    setup.clock.now += 14
    await creds.auth_headers(setup.server, who, trusted=True)
    assert len(setup.endpoint.requests) == 1
    setup.clock.now += 1
    await creds.auth_headers(setup.server, who, trusted=True)
    assert len(setup.endpoint.requests) == 2


async def test_invalidate_after_a_401_forces_a_new_token(setup: Setup) -> None:
    creds = setup.credentials()
    who = requester(setup.org)
    first = await creds.auth_headers(setup.server, who, trusted=True)

    await creds.invalidate(setup.server, who)
    second = await creds.auth_headers(setup.server, who, trusted=True)

    assert len(setup.endpoint.requests) == 2 and first != second


async def test_a_late_401_for_an_old_token_does_not_evict_the_new_one(setup: Setup) -> None:
    creds = setup.credentials()
    who = requester(setup.org)
    refused = await creds.auth_headers(setup.server, who, trusted=True)  # two calls both sent this

    await creds.invalidate(setup.server, who, refused=refused)  # the first call's 401
    fresh = await creds.auth_headers(setup.server, who, trusted=True)
    await creds.invalidate(setup.server, who, refused=refused)  # the second call's, arriving later

    assert await creds.auth_headers(setup.server, who, trusted=True) == fresh != refused
    assert len(setup.endpoint.requests) == 2
    await creds.invalidate(setup.server, who, refused=fresh)
    assert await creds.auth_headers(setup.server, who, trusted=True) not in (fresh, refused)


async def test_tokens_are_kept_apart_per_organisation_and_per_server_configuration(setup: Setup) -> None:
    creds = setup.credentials()
    other_org = (await OrgStore(setup.vault.db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id
    await setup.vault.put(other_org, SECRET_NAME, "other-secret")
    same_id_elsewhere = setup.server.model_copy(update={"url": "https://evil.example.com/billing"})

    a = await creds.auth_headers(setup.server, requester(setup.org), trusted=True)
    b = await creds.auth_headers(setup.server, requester(other_org), trusted=True)
    c = await creds.auth_headers(same_id_elsewhere, requester(setup.org), trusted=True)

    assert len({a["Authorization"], b["Authorization"], c["Authorization"]}) == 3
    assert setup.endpoint.requests[1].basic_credentials() == (CLIENT_ID, "other-secret")


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("status_500", r"answered HTTP 500 \(server_error: down\)"),
        ("oversized", "sent a body over 64 KiB"),
        ("oversized_chunked", "sent a body over 64 KiB"),
        ("no_token", "answered without an access_token"),
        ("redirect", r"answered with a redirect \(307\); redirects are not followed"),
        ("mac_token", "issued a token of type 'mac'"),
    ],
)
async def test_a_failed_exchange_raises_and_yields_no_headers(
    setup: Setup, behaviour: str, message: str
) -> None:
    setup.endpoint.behaviour = behaviour
    creds = setup.credentials()
    who = requester(setup.org)

    with pytest.raises(McpAuthError, match=message) as caught:
        await creds.auth_headers(setup.server, who, trusted=True)

    assert caught.value.message.startswith(
        f"MCP server 'billing': the OAuth token endpoint {setup.endpoint.url}"
    )
    assert setup.client_secret not in caught.value.message
    assert setup.endpoint.redirect_hits == 0
    setup.endpoint.behaviour = "ok"  # a failure is not cached: the next call tries again
    assert await creds.auth_headers(setup.server, who, trusted=True) == {
        "Authorization": f"Bearer {setup.endpoint.issued[-1]}"
    }


async def test_a_token_endpoint_that_does_not_answer_times_out(setup: Setup) -> None:
    setup.endpoint.behaviour = "hang"
    creds = setup.credentials(token_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(McpAuthError, match=r"did not answer within 0\.5s"):
        await creds.auth_headers(setup.server, requester(setup.org), trusted=True)
    assert time.monotonic() - started < 5


async def test_the_run_deadline_bounds_the_exchange_too(setup: Setup) -> None:
    setup.endpoint.behaviour = "hang"
    who = requester(setup.org, seconds=0.3)
    with pytest.raises(McpAuthError, match="did not answer within"):
        await setup.credentials(token_timeout=30).auth_headers(setup.server, who, trusted=True)


async def test_tls_is_verified(setup: Setup) -> None:
    creds = setup.credentials(verify=True)  # the system trust store does not know the test's CA
    with pytest.raises(McpAuthError, match="is unreachable"):
        await creds.auth_headers(setup.server, requester(setup.org), trusted=True)
    assert setup.endpoint.requests == []


async def test_the_default_trust_store_honours_ssl_cert_file(
    setup: Setup, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """How a deployment (or an end-to-end test) trusts a private CA for its identity provider."""
    ca_file = tmp_path / "ca.pem"
    setup.endpoint.ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    creds = VaultCredentials(setup.vault, MemoryCache())  # what Gateway builds: no verify given
    headers = await creds.auth_headers(setup.server, requester(setup.org), trusted=True)
    assert headers == {"Authorization": f"Bearer {setup.endpoint.issued[0]}"}


async def test_a_plain_http_token_url_is_refused(setup: Setup) -> None:
    assert token_url_problem("http://idp.local/token") == "must be https (got http://idp.local/token)"
    assert token_url_problem("https://user:pw@idp.example.com/t") is not None
    assert token_url_problem("https://idp.example.com/oauth/token") is None
    # Loopback traffic never leaves the machine: a local identity provider may speak plain http.
    for local in ("http://localhost:8081/token", "http://127.0.0.1/t", "http://[::1]:9/t"):
        assert token_url_problem(local) is None
    assert token_url_problem("http://localhost.example.com/t") is not None
    plain = unchecked_server(
        "b",
        setup.server.url,
        type="oauth",
        secret_ref=f"secret.{SECRET_NAME}",
        token_url="http://idp.example.com/token",
        client_id="c",
    )
    with pytest.raises(McpAuthError, match=r"auth\.token_url: must be https"):
        await setup.credentials().auth_headers(plain, requester(setup.org), trusted=True)
    assert setup.endpoint.requests == []


async def test_an_inline_oauth_plugin_needs_both_hosts_allowed(setup: Setup) -> None:
    creds = setup.credentials(allow_private_hosts=True)
    who = requester(setup.org)
    token_host = f"localhost:{setup.endpoint.server.port}"
    await setup.vault.put(setup.org, SECRET_NAME, setup.client_secret, [token_host])
    with pytest.raises(
        PermissionDenied, match=r"host 'mcp\.example\.com' \(https, port 443; MCP server 'billing', url\)"
    ):
        await creds.authorize(setup.server, who, trusted=False)
    await setup.vault.put(setup.org, SECRET_NAME, setup.client_secret, ["mcp.example.com", "localhost"])
    with pytest.raises(
        PermissionDenied, match=r"host 'localhost' \(https, port \d+; MCP server 'billing', token_url\)"
    ):
        await creds.authorize(setup.server, who, trusted=False)  # localhost alone is port 443
    assert setup.endpoint.requests == []

    await setup.vault.put(setup.org, SECRET_NAME, setup.client_secret, ["mcp.example.com", token_host])
    await creds.authorize(setup.server, who, trusted=False)
    assert await creds.auth_headers(setup.server, who, trusted=False) == {
        "Authorization": f"Bearer {setup.endpoint.issued[0]}"
    }


async def test_an_inline_plugin_cannot_aim_the_token_request_at_a_private_address(setup: Setup) -> None:
    creds = setup.credentials()  # allow_private_hosts defaults to False
    with pytest.raises(McpAuthError, match="resolves to a non-public address") as caught:
        await creds.auth_headers(setup.server, requester(setup.org), trusted=False)
    assert caught.value.code == "egress_denied"
    assert setup.endpoint.requests == []
    await creds.auth_headers(setup.server, requester(setup.org), trusted=True)  # hatchway.yaml may
    assert len(setup.endpoint.requests) == 1


async def test_a_pinned_address_is_where_the_request_goes_with_the_name_kept_for_tls(setup: Setup) -> None:
    endpoint = TokenEndpoint(verify=setup.endpoint.client_tls(), timeout=5)
    grant = TokenGrant(setup.endpoint.url, "c", "s")

    token = await endpoint.exchange(grant, what="t", pin=PinnedAddress("localhost", "127.0.0.1"))

    assert token.value == setup.endpoint.issued[0]
    assert setup.endpoint.requests[0].headers["host"] == f"localhost:{setup.endpoint.server.port}"
    with pytest.raises(McpAuthError, match="unreachable"):  # nothing listens on 127.0.0.2
        await endpoint.exchange(grant, what="t", pin=PinnedAddress("localhost", "127.0.0.2"))
    assert len(setup.endpoint.requests) == 1


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("::1", False),
        ("fd00::1", False),
        ("::ffff:127.0.0.1", False),
        ("224.0.0.1", False),
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
    ],
)
async def test_public_addresses(address: str, public: bool) -> None:
    assert (forbidden_reason(ip_address(address)) is None) is public


async def test_localhost_is_not_public() -> None:
    import httpx

    with pytest.raises(McpAuthError, match="'localhost' resolves to a non-public address"):
        await pin_public_address(httpx.URL("https://localhost/token"), what="t")
