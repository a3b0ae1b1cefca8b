"""Held: an inline plugin cannot aim the gateway at its own network (SSRF), in any address form.

The attack: a ``hatchway-mcp-plugin`` header (base64 YAML, written by whoever holds a key) whose
server ``url`` — or whose OAuth ``auth.token_url`` — names loopback, private, link-local, metadata,
unspecified or IPv4-mapped addresses, spelled every way a resolver accepts: short (``127.1``), hex,
octal, decimal, IPv6-mapped, a trailing dot, userinfo in front of the host, ``localhost``. Each must
be a 403 ``egress_denied`` naming the field, before any request leaves: a TCP listener on the
loopback port the loopback forms name accepts no connection, and the model is never called. No form
needs DNS: ``localhost`` is in /etc/hosts, and ``localhost.`` and the percent-encoded host do not
resolve offline (refused as unresolvable; where ``localhost.`` resolves, as loopback: 403 either
way). The literal ``127.0.0.1`` and stdio commands are ``tests/api/test_chat_mcp_loop.py``
``test_an_inline_plugin_aimed_at_loopback_is_refused_unless_allowed``;
the address rule alone is ``tests/engine/tools/mcp/test_egress.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import openai

from tests.support.agent_loop import USER, inline
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import connections

LOOPBACK = [
    "127.1",
    "0x7f.1",
    "0x7f000001",
    "2130706433",
    "0177.0.0.1",
    "017700000001",
    "127.000.000.001",
    "127.0.0.1.",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "[::127.0.0.1]",
    "0.0.0.0",
    "0",
    "[::]",
    "[::ffff:0.0.0.0]",
    "localhost",
    "LOCALHOST",
    "localhost.",
    "%31%32%37.0.0.1",
]
"""Hosts that reach this machine; the port put after them is the listener's."""
INTERNAL = [
    "169.254.169.254",
    "0251.0376.0251.0376",
    "0xa9fea9fe",
    "2852039166",
    "[::ffff:a9fe:a9fe]",
    "[fd00:ec2::254]",
    "[fe80::1%25eth0]",
    "100.100.100.200",
    "192.0.0.192",
    "10.0.0.1",
    "172.16.0.1",
    "192.168.0.1",
    "[fd00::1]",
    "[64:ff9b::7f00:1]",
]
"""Cloud metadata (AWS, Azure/GCP alias forms, AWS IPv6, Alibaba, Oracle), private and link-local."""
PUBLIC_SERVER = "https://93.184.216.34/mcp"
"""A public literal: passes the rule without DNS, so the token URL is the field refused."""


def urls(port: int, path: str, *, scheme: str = "http") -> dict[str, str]:
    found = {host: f"{scheme}://{host}:{port}{path}" for host in LOOPBACK}
    return found | {host: f"{scheme}://{host}{path}" for host in INTERNAL}


def outcome(call: Callable[[], Any]) -> tuple[int, str | None, str]:
    try:
        call()
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return exc.status_code, body.get("code"), body.get("message", "")
    return 200, None, ""


def server(url: str, **extra: Any) -> dict[str, Any]:
    return {"mcp_servers": [{"id": "s", "url": url, "timeout_ms": 1000, "max_retries": 0, **extra}]}


def test_inline_server_urls_in_every_internal_form_are_refused_before_connecting(
    gateway: RunningGateway, llm: ScriptedLLM, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    attempts = urls(port, "/mcp") | {
        "userinfo": f"http://user:pw@127.0.0.1:{port}/mcp",
        "public-looking userinfo": f"http://mcp.example.com@127.0.0.1:{port}/mcp",
    }
    refused = {}
    for form, url in attempts.items():
        client = gateway.client(default_headers={"hatchway-mcp-plugin": inline(server(url))})
        status, code, message = outcome(
            lambda c=client: c.chat.completions.create(model="gpt-4o", messages=USER)
        )
        refused[form] = (status, code, "mcp_servers[0].url" in message)
    assert refused == dict.fromkeys(attempts, (403, "egress_denied", True))
    assert connections(listener) == 0 and llm.requests == []


def test_inline_oauth_token_urls_in_every_internal_form_are_refused_before_connecting(
    gateway: RunningGateway, llm: ScriptedLLM, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    attempts = urls(port, "/token", scheme="https")
    refused = {}
    for form, token_url in attempts.items():
        auth = {"type": "oauth", "token_url": token_url, "client_id": "c", "secret_ref": "secret.idp"}
        plugin = inline(server(PUBLIC_SERVER, auth=auth))
        client = gateway.client(default_headers={"hatchway-mcp-plugin": plugin})
        status, code, message = outcome(lambda c=client: c.responses.create(model="gpt-4o", input="go"))
        refused[form] = (status, code, "mcp_servers[0].auth.token_url" in message)
    assert refused == dict.fromkeys(attempts, (403, "egress_denied", True))
    assert connections(listener) == 0 and llm.requests == []
