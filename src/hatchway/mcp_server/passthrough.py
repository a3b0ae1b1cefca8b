"""An MCP endpoint's resources, resource templates, prompts and completions (``resources: true``,
``prompts: true``), passed through from the plugin's servers.

Listings are gathered from every server (a failing one is skipped, each bounded to
``MAX_LIST_PAGES`` pages); a read goes to the server that listed the URI, else to the server whose
resource template matches it, the most specific first (RFC 6570: a catch-all template of one server
never takes what another's own template names); a prompt to the server that listed it, under the
endpoint's naming. An upstream's ``input_required`` goes to the client as the endpoint's own round
(``relay.py``); its JSON-RPC errors are relayed as such, redacted; every result is redacted whole by
the endpoint's handlers (``results.py``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import mcp_types as types
from mcp.shared.exceptions import MCPError

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.errors import McpServerError, ToolError
from hatchway.mcp_server.relay import ClientSide, relay_state, relayed_state
from hatchway.mcp_server.results import relayed_error

if TYPE_CHECKING:
    from mcp import Client

    from hatchway.config.plugin import PluginConfig
    from hatchway.config.settings import McpEndpointConfig
    from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

logger = logging.getLogger(__name__)
T = TypeVar("T")
MAX_LIST_PAGES = 50
"""Pages of one server's resource or prompt listing read at most."""
RESOURCE_NOT_FOUND = -32002


class EndpointParts(Protocol):
    """What of its endpoint a ``Passthrough`` uses (``endpoint.Endpoint``)."""

    config: McpEndpointConfig
    plugin: PluginConfig

    def mcp_client(self, capabilities: dict[str, Any] | None) -> PluginMcpClient: ...

    def public_name(self, server: McpServerConfig, name: str) -> str: ...

    async def learn_secrets(self, ctx: RunContext) -> None: ...


class Passthrough:
    """The resource, prompt and completion handlers of one endpoint.

    Each handler is given the SDK's request context, its params and the run context made for the
    request (``Endpoint._answering``); its upstream requests declare the MCP client's capabilities.
    """

    def __init__(self, endpoint: EndpointParts) -> None:
        self.endpoint = endpoint

    def _client(self, request_ctx: Any) -> PluginMcpClient:
        return self.endpoint.mcp_client(ClientSide.of(request_ctx).capabilities)

    async def _from_servers(
        self,
        client: PluginMcpClient,
        ctx: RunContext,
        send: Callable[[Client, str | None], Awaitable[Any]],
        field: str,
    ) -> list[tuple[McpServerConfig, Any]]:
        """Every entry of a paginated listing, from every server of the plugin (a failing one skipped)."""
        await self.endpoint.learn_secrets(ctx)
        found: list[tuple[McpServerConfig, Any]] = []
        for server in self.endpoint.plugin.mcp_servers:
            cursor: str | None = None
            try:
                for _ in range(MAX_LIST_PAGES):
                    page = await client.request(server, ctx, lambda c, cur=cursor: send(c, cur))
                    found.extend((server, entry) for entry in getattr(page, field))
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except ToolError as exc:
                logger.warning(
                    "MCP endpoint %s: %s not listed (%s)", self.endpoint.config.name, server.id, exc.code
                )
        return found

    async def list_resources(
        self, request_ctx: Any, params: Any, ctx: RunContext
    ) -> types.ListResourcesResult:
        found = await self._from_servers(
            self._client(request_ctx),
            ctx,
            lambda c, cur: c.session.list_resources(params=_page(cur)),
            "resources",
        )
        return types.ListResourcesResult(resources=[resource for _server, resource in found])

    async def list_resource_templates(
        self, request_ctx: Any, params: Any, ctx: RunContext
    ) -> types.ListResourceTemplatesResult:
        found = await self._from_servers(
            self._client(request_ctx),
            ctx,
            lambda c, cur: c.session.list_resource_templates(params=_page(cur)),
            "resource_templates",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template for _s, template in found])

    async def read_resource(
        self, request_ctx: Any, params: types.ReadResourceRequestParams, ctx: RunContext
    ) -> Any:
        uri = str(params.uri)
        client = self._client(request_ctx)
        server = await self._resource_server(client, ctx, uri)
        upstream_state = relayed_state(params.request_state)

        async def read(client: Client) -> Any:
            return await client.session.read_resource(
                uri,
                input_responses=params.input_responses,
                request_state=upstream_state,
                allow_input_required=True,
            )

        return await self._relayed(client, server, ctx, read, uri)

    async def _resource_server(self, client: PluginMcpClient, ctx: RunContext, uri: str) -> McpServerConfig:
        servers = self.endpoint.plugin.mcp_servers
        if len(servers) == 1:
            return servers[0]
        found = await self._from_servers(
            client, ctx, lambda c, cur: c.session.list_resources(params=_page(cur)), "resources"
        )
        for server, resource in found:
            if str(resource.uri) == uri:
                return server
        templates = await self._from_servers(
            client,
            ctx,
            lambda c, cur: c.session.list_resource_templates(params=_page(cur)),
            "resource_templates",
        )
        # The template that matches, the most specific first (the longest literal part): a
        # catch-all template of one server never takes what another's own template names.
        matching = [
            (literal_chars(t.uri_template), server)
            for server, t in templates
            if template_matches(t.uri_template, uri)
        ]
        if matching:
            return max(matching, key=lambda entry: entry[0])[1]
        raise MCPError(code=RESOURCE_NOT_FOUND, message="Resource not found", data={"uri": uri})

    async def list_prompts(self, request_ctx: Any, params: Any, ctx: RunContext) -> types.ListPromptsResult:
        found = await self._from_servers(
            self._client(request_ctx),
            ctx,
            lambda c, cur: c.session.list_prompts(params=_page(cur)),
            "prompts",
        )
        prompts = {
            self.endpoint.public_name(server, p.name): p.model_copy(
                update={"name": self.endpoint.public_name(server, p.name)}
            )
            for server, p in found
        }
        return types.ListPromptsResult(prompts=[prompts[name] for name in sorted(prompts)])

    async def _prompt_route(
        self, client: PluginMcpClient, ctx: RunContext, name: str
    ) -> tuple[McpServerConfig, str]:
        found = await self._from_servers(
            client, ctx, lambda c, cur: c.session.list_prompts(params=_page(cur)), "prompts"
        )
        for server, prompt in found:
            if self.endpoint.public_name(server, prompt.name) == name:
                return server, prompt.name
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name}")

    async def get_prompt(
        self, request_ctx: Any, params: types.GetPromptRequestParams, ctx: RunContext
    ) -> Any:
        client = self._client(request_ctx)
        server, prompt = await self._prompt_route(client, ctx, params.name)
        upstream_state = relayed_state(params.request_state)

        async def get(client: Client) -> Any:
            return await client.session.get_prompt(
                prompt,
                params.arguments,
                input_responses=params.input_responses,
                request_state=upstream_state,
                allow_input_required=True,
            )

        return await self._relayed(client, server, ctx, get, prompt)

    async def complete(
        self, request_ctx: Any, params: types.CompleteRequestParams, ctx: RunContext
    ) -> types.CompleteResult:
        client = self._client(request_ctx)
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            server, prompt = await self._prompt_route(client, ctx, ref.name)
            ref = ref.model_copy(update={"name": prompt})
        else:
            server = await self._resource_server(client, ctx, ref.uri)
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}

        async def complete(client: Client) -> types.CompleteResult:
            return await client.session.complete(ref=ref, argument=argument, context_arguments=context)

        return await self._upstream(client, server, ctx, complete)

    async def _relayed(
        self,
        client: PluginMcpClient,
        server: McpServerConfig,
        ctx: RunContext,
        send: Callable[[Client], Awaitable[Any]],
        target: str,
    ) -> Any:
        """A request that may answer ``input_required``: the round goes to the endpoint's client."""
        result = await self._upstream(client, server, ctx, send)
        if isinstance(result, types.InputRequiredResult):
            from hatchway.engine.tools.mcp.inputs import InputRound

            round_ = InputRound(server.id, target, 1, dict(result.input_requests or {}), result.request_state)
            return types.InputRequiredResult(
                input_requests=result.input_requests, request_state=relay_state(round_)
            )
        return result

    async def _upstream(
        self,
        client: PluginMcpClient,
        server: McpServerConfig,
        ctx: RunContext,
        send: Callable[[Client], Awaitable[T]],
    ) -> T:
        """One request to ``server``; its JSON-RPC error relayed to the client (redacted)."""
        try:
            return await client.request(server, ctx, send)
        except McpServerError as exc:
            if exc.rpc_error is not None:
                raise relayed_error(exc.rpc_error, ctx) from None
            raise MCPError(code=types.INTERNAL_ERROR, message=ctx.redact(exc.message)) from None
        except ToolError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=ctx.redact(exc.message)) from None


_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def template_matches(template: str, uri: str) -> bool:
    """Whether ``uri`` is one of the URIs an RFC 6570 ``template`` describes: a simple expression
    (``{id}``) stands for one path segment, a reserved or path one (``{+path}``, ``{/path}``…) for
    anything."""
    pattern, at = [], 0
    for match in _EXPRESSION.finditer(template):
        pattern.append(re.escape(template[at : match.start()]))
        pattern.append("[^/?#]+" if match.group(1) == "" else ".*")
        at = match.end()
    pattern.append(re.escape(template[at:]))
    return re.fullmatch("".join(pattern), uri) is not None


def literal_chars(template: str) -> int:
    return len(_EXPRESSION.sub("", template))


def _page(cursor: str | None) -> types.PaginatedRequestParams | None:
    return types.PaginatedRequestParams(cursor=cursor) if cursor else None
