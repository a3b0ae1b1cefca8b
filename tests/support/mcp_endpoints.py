"""A gateway serving an MCP endpoint (``mcp_endpoints``) in front of the ``calc`` test server, whose
bearer comes from the organisation's vault: what the endpoint tests and the client tests share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.agent_loop import write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer

UPSTREAM_TOKEN = "upstream-token-7e3f9b2c1a"
"""The upstream's bearer, in the vault as ``secret.calc_token``: the MCP client must never see it."""


def calc_endpoint(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Any,
    tmp_path: Path,
    *,
    agent: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **endpoint: Any,
) -> tuple[McpTestServer, RunningGateway]:
    """The ``calc`` server (``add`` and ``echo`` allowed) behind the agent ``calc``'s endpoint
    ``/mcp/tools``; ``agent`` is the plugin's ``agent:`` section, ``config`` more hatchway.yaml keys,
    ``endpoint`` more endpoint keys."""
    upstream = mcp_server_factory("calc", required_bearer=UPSTREAM_TOKEN)
    server = {
        "id": "calc",
        "url": upstream.url,
        "tools": ["add", "echo"],
        "auth": {"type": "bearer", "secret_ref": "secret.calc_token"},
    }
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [server], **({"agent": agent} if agent else {})})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "calc", "model": "gpt-4o", "plugin": plugin}],
        mcp_endpoints=[{"name": "tools", "agent": "calc", **endpoint}],
        **(config or {}),
    )
    assert gateway.put_secret("calc_token", UPSTREAM_TOKEN).status_code == 201
    return upstream, gateway
