"""OAuth ``client_auth: private_key_jwt`` (RFC 7523): a real TLS token endpoint verifies each assertion."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from hatchway.config.plugin import McpServerConfig
from hatchway.credentials import VaultCredentials
from hatchway.errors import McpAuthError
from hatchway.redaction import Redactor
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault
from tests.support.leak_scanner import SecretScanner
from tests.support.server_configs import requester
from tests.support.token_endpoint import TokenEndpoint

pytestmark = pytest.mark.anyio

CLIENT_ID = "hatchway-machine-client"
KEY_NAME = "mcp_signing_key"


def key_pair(kind: str) -> tuple[str, str]:
    """(private PEM, public PEM) for an EC P-256 or an RSA-2048 key."""
    key = ec.generate_private_key(ec.SECP256R1()) if kind == "ec" else rsa.generate_private_key(65537, 2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


@dataclass
class Setup:
    endpoint: TokenEndpoint
    vault: Vault
    org: str
    scanner: SecretScanner

    async def store_key(self, pem: str) -> None:
        await self.vault.put(self.org, KEY_NAME, pem, [])
        self.scanner.watch(pem)

    def server(self, **auth: object) -> McpServerConfig:
        return McpServerConfig.model_validate(
            {
                "id": "billing",
                "url": "https://mcp.example.com/billing",
                "auth": {
                    "type": "oauth",
                    "token_url": self.endpoint.url,
                    "client_id": CLIENT_ID,
                    "client_auth": "private_key_jwt",
                    "private_key_ref": f"secret.{KEY_NAME}",
                    **auth,
                },
            }
        )

    def credentials(self) -> VaultCredentials:
        return VaultCredentials(self.vault, MemoryCache(), verify=self.endpoint.client_tls())


@pytest.fixture
async def setup(secret_scanner: SecretScanner, tmp_path: Path, sqlite_db: Database) -> AsyncIterator[Setup]:
    endpoint = TokenEndpoint(tmp_path, client_id=CLIENT_ID).start()
    vault = Vault(sqlite_db, MasterKey.generate("test"))
    org = (await OrgStore(sqlite_db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id
    secret_scanner.watch_database(sqlite_db.url)
    yield Setup(endpoint, vault, org, secret_scanner)
    endpoint.stop()
    secret_scanner.watch(*endpoint.issued)


async def test_an_es256_assertion_gets_a_token_that_the_endpoint_verified(setup: Setup) -> None:
    private, public = key_pair("ec")
    setup.endpoint.public_key = public
    await setup.store_key(private)
    seen = Redactor()

    headers = await setup.credentials().auth_headers(
        setup.server(kid="key-2024"), requester(setup.org, seen), trusted=True
    )

    [token] = setup.endpoint.issued
    assert headers == {"Authorization": f"Bearer {token}"}
    [(header, claims)] = setup.endpoint.assertions
    assert header["alg"] == "ES256" and header["kid"] == "key-2024"
    assert claims["iss"] == claims["sub"] == CLIENT_ID
    assert claims["aud"] == setup.endpoint.url
    assert 0 < claims["exp"] - claims["iat"] <= 60
    [request] = setup.endpoint.requests
    assert request.basic_credentials() is None  # no shared secret anywhere
    assert request.form["grant_type"] == "client_credentials"
    assert request.form["client_id"] == CLIENT_ID
    assert private in seen.values()  # the key is redacted like any other secret


async def test_an_rs256_key_and_an_explicit_audience_are_honoured(setup: Setup) -> None:
    private, public = key_pair("rsa")
    setup.endpoint.public_key = public
    setup.endpoint.audience = "https://idp.example.com"
    await setup.store_key(private)
    creds = setup.credentials()
    server = setup.server(audience="https://idp.example.com")

    await creds.auth_headers(server, requester(setup.org), trusted=True)
    await creds.invalidate(server, requester(setup.org))  # a 401 from the server: fetch a new token
    await creds.auth_headers(server, requester(setup.org), trusted=True)

    assert len(setup.endpoint.issued) == 2
    (h1, c1), (h2, c2) = setup.endpoint.assertions
    assert h1["alg"] == h2["alg"] == "RS256" and "kid" not in h1
    assert c1["aud"] == "https://idp.example.com"
    assert c1["jti"] != c2["jti"]  # each assertion is single-use


async def test_an_assertion_signed_with_another_key_is_refused_without_showing_the_key(setup: Setup) -> None:
    private, _ = key_pair("ec")
    _, someone_elses_public = key_pair("ec")
    setup.endpoint.public_key = someone_elses_public
    await setup.store_key(private)

    with pytest.raises(McpAuthError) as caught:
        await setup.credentials().auth_headers(setup.server(), requester(setup.org), trusted=True)

    assert caught.value.code == "oauth_failed"
    assert "HTTP 401 (invalid_client" in caught.value.message
    assert setup.endpoint.rejections and "Signature verification failed" in setup.endpoint.rejections[0]
    assert setup.endpoint.issued == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not a key at all", "not an unencrypted PEM private key"),
        (
            ec.generate_private_key(ec.SECP384R1())
            .private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            .decode(),
            r"must be EC P-256 \(ES256\) or RSA",
        ),
    ],
)
async def test_a_vault_entry_that_is_not_a_usable_key_is_named_not_shown(
    setup: Setup, value: str, problem: str
) -> None:
    setup.endpoint.public_key = key_pair("ec")[1]
    await setup.store_key(value)

    with pytest.raises(McpAuthError, match=problem) as caught:
        await setup.credentials().auth_headers(setup.server(), requester(setup.org), trusted=True)

    assert caught.value.code == "oauth_bad_private_key"
    assert setup.endpoint.requests == []  # nothing was sent
