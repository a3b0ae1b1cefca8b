"""Held: an inline plugin may send a vault secret only to the hosts its owner allowed.

The attacks, each with a valid key and a plugin in the ``hatchway-mcp-plugin`` header: aim a
secret allowed for ``mcp.example.com`` at a server of the caller's choosing (another host, the
allowed name as userinfo, path, query or fragment, a parent, child or look-alike domain; ``bearer``
and ``api_key``; a second server of the same plugin); use a secret that has no ``allowed_hosts``
(it is for hatchway.yaml plugins only); use another organisation's secret of the same name. Each is
refused at plan time — 403 ``secret_host_not_allowed`` or 404 ``secret_not_found`` naming
``mcp_servers[i].auth.secret_ref`` — with nothing sent to any server and the model not called.

Every gateway here runs with ``allow_private_mcp_urls: true``, so the egress rule lets the loopback
server through and the secret's scope is the only thing refusing. The allowed hosts are bare
https-style names and the servers plain http on a loopback port, so the refusals hold whether
``allowed_hosts`` binds scheme and port or only the host. Known: the loopback host allowed and
then used, and organisation B's own secret through a hatchway.yaml plugin, are
``tests/api/test_mcp_secrets_e2e.py``; both OAuth hosts, ``tests/credentials/test_oauth.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.agent_loop import USER, inline, rounds, rule_for, summarise
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner, put_secret
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

ALLOWED = "mcp.example.com"
BEARER = {"type": "bearer", "secret_ref": "secret.search_key"}


def refusal(gw: RunningGateway, servers: list[dict[str, Any]], key: str | None = None) -> dict[str, Any]:
    """The error body of a chat request whose inline plugin has ``servers`` (it must fail)."""
    client = gw.client(key, default_headers={"hatchway-mcp-plugin": inline({"mcp_servers": servers})})
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    return {"status": failed.value.status_code, **failed.value.body}


@pytest.fixture
def value(secret_scanner: SecretScanner) -> str:
    secret = f"sk-search-{uuid.uuid4().hex}"
    secret_scanner.watch(secret)
    return secret


def test_a_secret_goes_only_to_its_allowed_hosts(
    value: str,
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("search")
    gw = gateway_factory(allow_private_mcp_urls=True)
    put_secret(gw, gw.key, "search_key", value, secret_scanner, hosts=[ALLOWED])
    port = server.server.port
    hosts = {
        f"http://127.0.0.1:{port}/mcp": "127.0.0.1",
        f"http://localhost:{port}/mcp": "localhost",
        f"http://{ALLOWED}@127.0.0.1:{port}/mcp": "127.0.0.1",
        f"http://127.0.0.1:{port}/{ALLOWED}/mcp": "127.0.0.1",
        f"http://127.0.0.1:{port}/mcp?host={ALLOWED}": "127.0.0.1",
        f"http://127.0.0.1:{port}/mcp#{ALLOWED}": "127.0.0.1",
        f"https://evil.{ALLOWED}/mcp": f"evil.{ALLOWED}",
        "https://example.com/mcp": "example.com",
        f"https://{ALLOWED}.evil.test/mcp": f"{ALLOWED}.evil.test",
        "https://mcp-example.com/mcp": "mcp-example.com",
    }
    for url, host in hosts.items():
        for auth in (BEARER, {**BEARER, "type": "api_key"}):
            error = refusal(gw, [{"id": "s", "url": url, "auth": auth}])
            secret_scanner.observe("refusal", json.dumps(error))
            assert (error["status"], error["code"]) == (403, "secret_host_not_allowed"), url
            assert error["param"] == "mcp_servers[0].auth.secret_ref"
            assert f"may not be sent to host '{host}'" in error["message"], (url, error["message"])

    # A plugin that names the allowed host first and an attacker's server second is refused whole.
    both = [
        {"id": "ok", "url": f"https://{ALLOWED}/mcp", "auth": BEARER},
        {"id": "s", "url": server.url, "auth": {**BEARER}},  # a copy: YAML would alias the same dict
    ]
    error = refusal(gw, both)
    assert error["code"] == "secret_host_not_allowed" and error["param"] == "mcp_servers[1].auth.secret_ref"
    assert server.requests == [] and llm.requests == []


def test_a_secret_without_allowed_hosts_is_for_hatchway_yaml_plugins_only(
    value: str,
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("search")
    plugin = {"mcp_servers": [{"id": "s", "url": server.url, "auth": BEARER}]}
    gw = gateway_factory(allow_private_mcp_urls=True, **rule_for(tmp_path, plugin))
    put_secret(gw, gw.key, "search_key", value, secret_scanner)  # no allowed_hosts

    for url in (server.url, f"https://{ALLOWED}/mcp"):
        error = refusal(gw, [{"id": "s", "url": url, "auth": BEARER}])
        assert error["code"] == "secret_host_not_allowed" and "allowed_hosts: none" in error["message"]
    assert server.requests == [] and llm.requests == []

    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    answer = gw.client().chat.completions.create(model="gpt-4o", messages=USER)  # the routing rule's plugin
    assert answer.choices[0].message.content == "Answer from: echo:x"
    assert set(server.bearers()) == {value}


def test_another_organisations_secret_of_the_same_name_is_never_used(
    value: str,
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("search")
    gw = gateway_factory(allow_private_mcp_urls=True)
    put_secret(gw, gw.key, "search_key", value, secret_scanner, hosts=[ALLOWED, "127.0.0.1"])
    other = gw.new_org()
    servers = [
        [{"id": "s", "url": f"https://{ALLOWED}/mcp", "auth": BEARER}],  # the very host A allows
        [{"id": "s", "url": server.url, "auth": BEARER}],
    ]

    for attempt in servers:
        error = refusal(gw, attempt, key=other.key)
        assert (error["status"], error["code"]) == (404, "secret_not_found")
        assert error["param"] == "mcp_servers[0].auth.secret_ref" and ALLOWED not in error["message"]

    own = f"sk-b-{uuid.uuid4().hex}"
    secret_scanner.watch(own)
    put_secret(gw, other.key, "search_key", own, secret_scanner)  # B's own, with no allowed_hosts
    for attempt in servers:
        error = refusal(gw, attempt, key=other.key)  # B's secret is the one checked: no hosts allowed
        assert error["code"] == "secret_host_not_allowed" and "allowed_hosts: none" in error["message"]
    assert server.requests == [] and llm.requests == []
