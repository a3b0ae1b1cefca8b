"""One catalog of a plugin's MCP tools: listed, allowlisted, pinned, named and routed in one place.

The agent loop (``McpToolset``) and an MCP endpoint (``mcp_server/endpoint.py``) both read their tools
here and route their calls here; they differ only in their last adapter — a ``ToolSpec`` for the
model, an MCP ``Tool`` for a client — and in how they tell the end user what the catalog found.

A listing, server by server (concurrently, decided in the plugin's order):

- a per-user OAuth server the end user has not authorized yet lists nothing and is reported with its
  consent link (``Listing.consent``): the loop answers the run with it, an endpoint answers the
  listing or the call with it (URL elicitation);
- a server that cannot be listed is reported (``Listing.failures``) and the others are listed;
- a tool is kept if its server's allowlist, then the caller's filter (an endpoint's ``tools``),
  expose its public name;
- a tool whose definition drifted from its pin is withheld (``tool_drift: block``), and its public
  name with it: no other server's tool of the same name takes its place (``Listing.withheld``), so
  a call of that name is refused rather than routed to a twin;
- two servers' tools with one public name (``namespace: false``): the first server's, in the
  plugin's order, keeps it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.engine.run_log import ListToolsStep
from hatchway.engine.tools.mcp.naming import namespaced_name
from hatchway.engine.tools.mcp.pinning import ToolPinning, unpinned
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.errors import AuthorizationRequired, HatchwayError

logger = logging.getLogger(__name__)

Naming = Callable[[McpServerConfig, str], str]
"""The public name of a server's tool."""


def namespaced(server: McpServerConfig, tool: str) -> str:
    """``<server_id>__<tool>``: the loop's names, and an endpoint's by default."""
    return namespaced_name(server.id, tool)


def upstream_name(server: McpServerConfig, tool: str) -> str:
    """The upstream's own name (an endpoint's ``namespace: false``)."""
    return tool


@dataclass(frozen=True, slots=True)
class CatalogTool:
    """One tool as the catalog offers it."""

    name: str
    """Its public name."""
    server: McpServerConfig
    tool: types.Tool
    """The upstream's definition (its own name)."""
    unpinned: bool = False
    """No approved pin vouches for its definition (``tool_drift: allow``, or a drift kept under ``warn``)."""


@dataclass(slots=True)
class Listing:
    """What one listing found."""

    tools: list[CatalogTool] = field(default_factory=list)
    """In the plugin's order of servers, each server's in its own order."""
    withheld: dict[str, str] = field(default_factory=dict)
    """Public name → the server whose tool of that name was withheld (its definition drifted)."""
    consent: dict[str, str] = field(default_factory=dict)
    """Server id → the link the end user opens to authorize that per-user server."""
    failures: list[ListToolsStep] = field(default_factory=list)
    """The servers that could not be listed, as the run log records them (the loop reports them)."""

    def get(self, name: str) -> CatalogTool | None:
        return next((t for t in self.tools if t.name == name), None)


class McpCatalog:
    """The tools of one plugin's servers, as one caller (the loop, an endpoint) offers them."""

    def __init__(
        self,
        client: PluginMcpClient,
        *,
        pinning: ToolPinning | None,
        naming: Naming = namespaced,
        exposes: Callable[[str], bool] | None = None,
    ) -> None:
        self.client = client
        self.pinning = pinning
        """Withholds tools whose definition drifted from the approved one (None: nothing pinned)."""
        self.naming = naming
        self.exposes = exposes or (lambda _name: True)
        """The caller's own filter on public names (an endpoint's ``tools``)."""

    @property
    def servers(self) -> list[McpServerConfig]:
        return list(self.client.plugin.mcp_servers)

    def servers_for(self, name: str | None) -> list[McpServerConfig]:
        """The servers a public name can be on: the one its namespace names, or, with the upstreams'
        own names, every one. A slow server (or its token endpoint) then never delays another's call."""
        if name is None or self.naming is not namespaced:
            return self.servers
        return [s for s in self.servers if name.startswith(namespaced_name(s.id, ""))]

    async def listing(self, ctx: RunContext, servers: list[McpServerConfig] | None = None) -> Listing:
        """The tools of ``servers`` (all the plugin's by default), as ``ctx``'s caller may see them."""
        chosen = self.servers if servers is None else servers
        found = await asyncio.gather(*(self._server(server, ctx) for server in chosen))
        listing = Listing()
        for server, (tools, loose, withheld, failure) in zip(chosen, found, strict=True):
            if isinstance(failure, AuthorizationRequired):
                listing.consent[server.id] = failure.link
                consent = "the user must authorize this server"
                listing.failures.append(ListToolsStep.failed(server.id, consent))
                continue
            if failure is not None:
                listing.failures.append(ListToolsStep.failed(server.id, ctx.redact(failure.message)))
                continue
            self._add(listing, server, tools, loose, withheld)
        return listing

    async def route(self, name: str, ctx: RunContext) -> CatalogTool | Listing:
        """The tool a public name calls, found by listing only the servers it can be on; else the
        listing that says why not (withheld, to authorize, unknown)."""
        listing = await self.listing(ctx, self.servers_for(name))
        return listing.get(name) or listing

    def _add(
        self,
        listing: Listing,
        server: McpServerConfig,
        tools: list[types.Tool],
        loose: set[str],
        withheld: set[str],
    ) -> None:
        """``server``'s tools into ``listing``, after the servers before it: a name already taken —
        by a tool listed, or by one withheld — is not this server's."""
        taken = {t.name: t.server.id for t in listing.tools} | listing.withheld
        for tool in tools:
            name = self.naming(server, tool.name)
            # An allowlist names tools as the reference says, ``<server>__<tool>``, whatever the
            # names the endpoint serves them by (``namespace: false``); the served name works too.
            qualified = namespaced(server, tool.name)
            if not self.exposes(name) and (qualified == name or not self.exposes(qualified)):
                continue
            if name in taken:
                logger.warning(
                    "MCP tool name %s is %s's; %s/%s not exposed", name, taken[name], server.id, tool.name
                )
                continue
            taken[name] = server.id
            if tool.name in withheld:
                listing.withheld[name] = server.id
            else:
                listing.tools.append(CatalogTool(name, server, tool, unpinned=tool.name in loose))

    async def _server(
        self, server: McpServerConfig, ctx: RunContext
    ) -> tuple[list[types.Tool], set[str], set[str], HatchwayError | None]:
        """One server's allowed tools, those no pin vouches for, those withheld, or its failure."""
        if server.dropped_headers:
            ctx.run.report(ListToolsStep.dropped(server.id, server.dropped_headers))
        try:
            tools = await self.client.list_tools(server, ctx)
        except AuthorizationRequired as needed:
            return [], set(), set(), needed
        except HatchwayError as exc:
            # One unreachable server must not take the others' tools away.
            logger.warning("MCP server %s: tools not listed (%s)", server.id, ctx.redact(exc.message))
            return [], set(), set(), exc
        tools = [tool for tool in tools if server.exposes(tool.name)]
        if self.pinning is None:
            return tools, set(), set(), None
        trusted = self.client.trusted
        admitted = await self.pinning.admitted(server, tools, ctx, trusted=trusted)
        kept = {tool.name for tool in admitted}
        withheld = {tool.name for tool in tools if tool.name not in kept}
        # Withheld tools stay in the list (in their order), so their names are taken: ``_add``.
        return tools, unpinned(server, admitted, ctx, trusted=trusted), withheld, None


def input_schema(tool: Any) -> dict[str, Any]:
    """A tool's input schema as a function's parameters: an object schema, or an empty one."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    if schema.get("type") != "object":
        return {"type": "object", "properties": {}}
    return schema
