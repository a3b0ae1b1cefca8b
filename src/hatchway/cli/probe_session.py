"""One diagnostic session with one MCP server, through exactly the gateway's client code.

``probe_server`` builds a one-server plugin and drives it with ``PluginMcpClient`` over a
``McpServerPool``: the same sessions, transports, per-call headers, credentials (``VaultCredentials``
over the vault or over values given to the CLI), timeouts and retries a run gets. It is what
``hatchway mcp probe`` prints, and what the MCP conformance adapter drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.credentials.consent import Consent
from hatchway.credentials.requester import Requester
from hatchway.credentials.user_oauth import MemoryGrants, UserOAuth, pre_registered
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpCallResult
from hatchway.engine.tools.mcp.credentials import McpCredentials
from hatchway.engine.tools.mcp.inputs import InputAnswerer
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import SecretNotFound, ToolError
from hatchway.principal import Principal
from hatchway.vault.store import Secret

PROBE_ORG = "probe"
"""The organisation id of a probe whose secrets were given on the command line."""


@dataclass(slots=True)
class ProbeReport:
    """What one probe learnt."""

    server_name: str | None
    server_version: str | None
    protocol_version: str | None
    tools: list[types.Tool]
    results: list[tuple[ToolCall, McpCallResult | ToolError]] = field(default_factory=list)
    """The outcome of each ``--call``, in order."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


def probe_context(org_id: str = PROBE_ORG, org_name: str = PROBE_ORG, *, timeout: float) -> RunContext:
    """A run context for a probe: its organisation (whose vault is read) and its time limit."""
    return RunContext.from_headers(Principal(org_id=org_id, org_name=org_name), {}, deadline_seconds=timeout)


class ProbeGrants:
    """Per-user OAuth for the probe: the person running it is the end user, consenting as ``consent`` says.

    One flow serves the whole probe (listing and calls), keeping its tokens in memory; nothing is
    written anywhere.
    """

    needs_end_user = False

    def __init__(
        self,
        consent: Consent,
        *,
        redirect_uri: str,
        client_id: str | None = None,
        client_metadata_url: str | None = None,
        auth_method: str | None = None,
    ) -> None:
        self.consent = consent
        self.redirect_uri = redirect_uri
        self.client_id = client_id
        self.client_metadata_url = client_metadata_url
        self.auth_method = auth_method
        self._flow: UserOAuth | None = None

    async def flow(
        self, server: Any, who: Requester, *, client_secret: str | None, trusted: bool = True
    ) -> UserOAuth:
        if self._flow is None:
            client = None
            if self.client_id is not None:
                client = pre_registered(self.client_id, client_secret, self.redirect_uri, self.auth_method)
            self._flow = UserOAuth(
                server.url,
                redirect_uri=self.redirect_uri,
                store=MemoryGrants(client),
                consent=self.consent,
                scopes=list(server.auth.scopes),
                client_metadata_url=self.client_metadata_url,
                auth_method=self.auth_method,
                dpop=server.auth.dpop,
            )
        return self._flow


async def probe_server(
    server: McpServerConfig,
    credentials: McpCredentials,
    ctx: RunContext,
    *,
    calls: list[ToolCall] | None = None,
    answerer: InputAnswerer | None = None,
) -> ProbeReport:
    """Connect, list the tools and (optionally) call some; ToolError says why it could not."""
    pool = McpServerPool(tools_ttl_seconds=0)
    client = PluginMcpClient(
        PluginConfig(version="1", mcp_servers=[server]),
        trusted=True,
        pool=pool,
        credentials=credentials,
        answerer=answerer,
    )
    try:
        tools = await client.list_tools(server, ctx)
        # The listing opened the session (with the call's credentials); this only looks it up.
        connection = await pool.connection(server, ctx.org_id, trusted=True, user=ctx.on_behalf_of)
        info = connection.client.server_info
        report = ProbeReport(
            server_name=info.name if info else None,
            server_version=info.version if info else None,
            protocol_version=connection.protocol_version,
            tools=tools,
        )
        for call in calls or []:
            outcome = await client.call(server, call.name, call.arguments, ctx)
            if outcome.error is not None:
                if len(calls or []) == 1:
                    raise outcome.error
                report.results.append((call, outcome.error))  # the others still run
            else:
                assert outcome.result is not None
                report.results.append((call, outcome.result))
        return report
    finally:
        await pool.aclose()


_UNREACHABLE = frozenset(
    {"mcp_unreachable", "mcp_connection_lost", "egress_denied", "tool_timeout", "tool_outcome_unknown"}
)


def failure_kind(error: ToolError) -> str:
    """``auth``, ``unreachable``, ``protocol`` or ``other``: what the CLI's exit code says."""
    code = error.code or ""
    if code.startswith("oauth_") or code in {
        "mcp_unauthorized",
        "mcp_auth_failed",
        "secret_not_found",
        "authorization_required",
        "user_identity_required",
    }:
        return "auth"
    if code in _UNREACHABLE:
        return "unreachable"
    if code in {"mcp_protocol_error", "mcp_http_error"}:
        return "protocol"
    return "other"


class GivenSecrets:
    """Secrets handed to the probe on stdin or in environment variables, in place of a vault."""

    def __init__(self, values: dict[str, str]) -> None:
        self._values = dict(values)

    async def get(self, org_id: str, name: str) -> Secret:
        value = self._values.get(name)
        if value is None:
            raise SecretNotFound(f"no secret '{name}' was given to the probe")
        return Secret(name=name, value=value)
