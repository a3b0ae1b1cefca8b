"""VaultCredentials for bearer and api_key servers: headers, secret scoping, organisation isolation."""

from __future__ import annotations

import uuid

import pytest

from hatchway.credentials import VaultCredentials
from hatchway.errors import InvalidRequest, McpAuthError, PermissionDenied, SecretNotFound
from hatchway.redaction import Redactor
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import MasterKey, Vault
from tests.support.leak_scanner import SecretScanner
from tests.support.server_configs import requester, server, unchecked_server

pytestmark = pytest.mark.anyio

SEARCH = server(
    "pesquisa", "https://mcp.example.com/search", type="bearer", secret_ref="secret.mcp_search_api_key"
)
CODE = server(
    "codigo",
    "https://code.example.com/mcp",
    type="api_key",
    secret_ref="secret.mcp_code_api_key",
    header="X-Code-Key",
)


@pytest.fixture
def vault(sqlite_db: Database, secret_scanner: SecretScanner) -> Vault:
    secret_scanner.watch_database(sqlite_db.url)
    return Vault(sqlite_db, MasterKey.generate("test"))


async def _org(vault: Vault) -> str:
    return (await OrgStore(vault.db).create_org(f"org-{uuid.uuid4().hex[:8]}")).id


async def test_bearer_and_api_key_headers_come_from_the_vault_and_are_redacted(
    vault: Vault, secret_scanner: SecretScanner
) -> None:
    org = await _org(vault)
    search_key, code_key = f"search-{uuid.uuid4().hex}", f"code-{uuid.uuid4().hex}"
    secret_scanner.watch(search_key, code_key)
    await vault.put(org, "mcp_search_api_key", search_key)
    await vault.put(org, "mcp_code_api_key", code_key)
    creds = VaultCredentials(vault, MemoryCache())
    seen = Redactor()
    who = requester(org, seen)

    await creds.authorize(SEARCH, who, trusted=True)
    assert await creds.auth_headers(SEARCH, who, trusted=True) == {"Authorization": f"Bearer {search_key}"}
    assert await creds.auth_headers(CODE, who, trusted=True) == {"X-Code-Key": code_key}
    default_header = server(
        "c", "https://code.example.com", type="api_key", secret_ref="secret.mcp_code_api_key"
    )
    assert await creds.auth_headers(default_header, who, trusted=True) == {"X-Api-Key": code_key}
    assert await creds.auth_headers(server("open", "https://o.example.com"), who, trusted=True) == {}

    assert {search_key, code_key} <= seen.values()
    assert seen.redact(f"echo {search_key} / {code_key}") == "echo [REDACTED] / [REDACTED]"


async def test_an_inline_plugin_may_only_send_a_secret_to_its_allowed_hosts(vault: Vault) -> None:
    org = await _org(vault)
    await vault.put(org, "mcp_search_api_key", "k-1", ["other.example.com"])
    creds = VaultCredentials(vault, MemoryCache())
    who = requester(org)

    with pytest.raises(PermissionDenied) as denied:
        await creds.authorize(SEARCH, who, trusted=False)
    assert denied.value.status_code == 403
    assert "secret 'mcp_search_api_key'" in denied.value.message
    assert "host 'mcp.example.com'" in denied.value.message and "k-1" not in denied.value.message
    with pytest.raises(McpAuthError, match=r"may not be sent to host 'mcp\.example\.com'"):
        await creds.auth_headers(SEARCH, who, trusted=False)

    await creds.authorize(SEARCH, who, trusted=True)  # hatchway.yaml plugins are trusted
    await vault.put(org, "mcp_search_api_key", "k-1", ["other.example.com", "MCP.Example.com"])
    await creds.authorize(SEARCH, who, trusted=False)
    assert await creds.auth_headers(SEARCH, who, trusted=False) == {"Authorization": "Bearer k-1"}


async def test_a_secret_without_allowed_hosts_is_for_trusted_plugins_only(vault: Vault) -> None:
    org = await _org(vault)
    await vault.put(org, "mcp_search_api_key", "k-2")
    creds = VaultCredentials(vault, MemoryCache())
    with pytest.raises(PermissionDenied, match="allowed_hosts: none"):
        await creds.authorize(SEARCH, requester(org), trusted=False)
    stdio = unchecked_server("local", None, type="bearer", secret_ref="secret.mcp_search_api_key")
    await vault.put(org, "mcp_search_api_key", "k-2", ["mcp.example.com"])
    with pytest.raises(PermissionDenied, match="has no url host"):
        await creds.authorize(stdio, requester(org), trusted=False)


async def test_organisation_b_never_gets_organisation_a_secret(vault: Vault) -> None:
    org_a, org_b, org_c = await _org(vault), await _org(vault), await _org(vault)
    await vault.put(org_a, "mcp_search_api_key", "value-of-a")
    await vault.put(org_b, "mcp_search_api_key", "value-of-b")
    creds = VaultCredentials(vault, MemoryCache())

    assert await creds.auth_headers(SEARCH, requester(org_b), trusted=True) == {
        "Authorization": "Bearer value-of-b"
    }
    with pytest.raises(SecretNotFound, match="secret 'mcp_search_api_key' not found"):
        await creds.authorize(SEARCH, requester(org_c), trusted=True)
    seen_by_c = Redactor()
    with pytest.raises(McpAuthError, match="MCP server 'pesquisa': secret 'mcp_search_api_key' not found"):
        await creds.auth_headers(SEARCH, requester(org_c, seen_by_c), trusted=True)
    assert seen_by_c.values() == set()


@pytest.mark.parametrize("value", ["line\r\nX-Injected: 1", "tab\tinside", "naïve"])
async def test_a_value_that_cannot_be_a_header_is_refused_without_echoing_it(
    vault: Vault, value: str
) -> None:
    org = await _org(vault)
    await vault.put(org, "mcp_search_api_key", value)
    with pytest.raises(McpAuthError, match="cannot be sent in an HTTP header") as caught:
        await VaultCredentials(vault, MemoryCache()).auth_headers(SEARCH, requester(org), trusted=True)
    assert value not in caught.value.message


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"type": "bearer"}, "auth.secret_ref: required for auth type 'bearer'"),
        ({"type": "bearer", "secret_ref": "secret.a/b"}, "found '/'"),
        ({"type": "kerberos", "secret_ref": "secret.x"}, "unknown auth type 'kerberos'"),
        ({"type": "oauth", "secret_ref": "secret.x", "client_id": "c"}, "auth.token_url: must be https"),
        (
            {"type": "oauth", "secret_ref": "secret.x", "token_url": "http://idp/t", "client_id": "c"},
            "must be https",
        ),
        (
            {"type": "oauth", "secret_ref": "secret.x", "token_url": "https://idp/t"},
            "auth.client_id: required",
        ),
    ],
)
async def test_malformed_auth_is_a_400_at_plan_time_and_a_tool_error_at_call_time(
    vault: Vault, auth: dict[str, str], message: str
) -> None:
    """Plugin validation refuses all of these first; the credentials do not rely on it."""
    entry = unchecked_server("s", "https://s.example.com", **auth)
    creds = VaultCredentials(vault, MemoryCache())
    who = requester(await _org(vault))
    with pytest.raises(InvalidRequest, match=message):
        await creds.authorize(entry, who, trusted=True)
    with pytest.raises(McpAuthError, match=message):
        await creds.auth_headers(entry, who, trusted=True)
