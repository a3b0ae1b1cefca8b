"""The tools of a plugin's MCP servers as one toolset of the loop: the catalog's tools (``catalog.py``:
listed, allowlisted, pinned, namespaced, routed) as the model sees them, results cached."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message, ToolSpec
from hatchway.engine.run_log import InputRoundStep, Outcome
from hatchway.engine.tools.base import Interruption, RunPreamble, ToolResult, Toolset
from hatchway.engine.tools.mcp.answers import UnreadableAnswer, answer_from_reply
from hatchway.engine.tools.mcp.catalog import CatalogTool, McpCatalog, input_schema
from hatchway.engine.tools.mcp.credentials import McpCredentials, requester_of
from hatchway.engine.tools.mcp.forwarding import forwarded_headers
from hatchway.engine.tools.mcp.naming import namespaced_name
from hatchway.engine.tools.mcp.pinning import ToolPinning
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import connection_key
from hatchway.engine.tools.mcp.questions import InputQuestions, InputRequested, PendingInput, check_answerer
from hatchway.engine.tools.payloads import connect_message, error_body, fit_output, parse_arguments
from hatchway.errors import AuthorizationRequired, HatchwayError, ToolOutcomeUnknown, ToolTimeout
from hatchway.store.cache import Cache

logger = logging.getLogger(__name__)


class McpToolset(Toolset):
    """Every allowed tool of the plugin's servers, named ``<server_id>__<tool>`` for the model."""

    def __init__(
        self,
        client: PluginMcpClient,
        *,
        cache: Cache,
        cache_ttl_seconds: float = 0,
        max_result_chars: int = 20_000,
        questions: InputQuestions | None = None,
        pinning: ToolPinning | None = None,
    ) -> None:
        self.client = client
        self.catalog = McpCatalog(client, pinning=pinning)
        self.questions = questions
        """Where a tool's questions to the end user (MRTR elicitation) are held across turns."""
        self.cache = cache
        self.cache_ttl_seconds = cache_ttl_seconds
        self.max_result_chars = max_result_chars
        """What the model reads of a result (``max_tool_result_chars``): all the cache keeps of it."""
        self._routes: dict[str, CatalogTool] = {}
        self._connect: dict[str, str] = {}
        """Per-user servers the end user must authorize first: server id → the link to do it."""

    def route(self, name: str) -> tuple[str, str] | None:
        """``(server_id, tool)`` behind a name the model saw, or None."""
        route = self._routes.get(name)
        return (route.server.id, route.tool.name) if route is not None else None

    def server_label(self, name: str) -> str | None:
        route = self._routes.get(name)
        return route.server.id if route is not None else None

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        listing = await self.catalog.listing(ctx)
        self._connect.update(listing.consent)
        for failure in listing.failures:
            ctx.run.report(failure)
        self._routes.update((entry.name, entry) for entry in listing.tools)
        return [
            ToolSpec(
                name=entry.name,
                description=entry.tool.description or "",
                parameters=input_schema(entry.tool),
                from_mcp=True,
                unpinned=entry.unpinned,
            )
            for entry in listing.tools
        ]

    async def before_run(self, items: list[Item], ctx: RunContext) -> RunPreamble | None:
        """A tool's open question is answered by the end user's message; a per-user server this end
        user has not authorized answers the run with the link(s)."""
        last = items[-1] if items else None
        if self.questions is not None and isinstance(last, Message) and last.role == "user":
            servers = {server.id: server for server in self.client.plugin.mcp_servers}
            pending = await self.questions.pending(ctx, servers)
            if pending is not None:
                return await self._answer(pending, servers[pending.server_id], last.text, ctx)
        if not self._connect:
            return None
        return RunPreamble(answer=connect_message(self._connect))

    async def _answer(
        self, pending: PendingInput, server: McpServerConfig, text: str, ctx: RunContext
    ) -> RunPreamble:
        """Send the call again with the user's answer; the next question, or the result for the model."""
        import mcp_types as types

        from hatchway.engine.tools.mcp.inputs import roots_answer

        assert self.questions is not None
        check_answerer(pending, ctx)
        call_id = f"call_{pending.id}"
        name = namespaced_name(server.id, pending.tool)
        call = FunctionCall(call_id=call_id, name=name, arguments=orjson.dumps(pending.arguments).decode())
        responses: dict[str, Any] = {}
        try:
            for key, request in pending.requests.items():
                if request.get("method") == "roots/list":
                    responses[key] = roots_answer()
                else:
                    responses[key] = types.ElicitResult.model_validate(answer_from_reply(text, request))
        except UnreadableAnswer as unreadable:
            return RunPreamble(answer=f"I could not use that answer ({unreadable}).\n\n{pending.question}")
        ctx.run.report(InputRoundStep(server.id, pending.tool, pending.round, answered=True))
        if not await self.questions.take(pending, ctx) or pending.expired:
            output = error_body("input_expired", "The tool's question expired before it was answered.")
            return RunPreamble(items=[call, FunctionCallOutput(call_id=call_id, output=output)])
        outcome = await self.client.call(
            server,
            pending.tool,
            pending.arguments,
            ctx,
            input_responses=responses,
            request_state=pending.request_state,
            input_round=pending.round + 1,
            task_id=pending.task_id,
        )
        if isinstance(outcome.error, InputRequested):  # another round
            return RunPreamble(answer=outcome.error.question)
        if outcome.error is not None:
            output = error_body(outcome.error.code or "tool_error", outcome.error.message)
        else:
            assert outcome.result is not None
            result = outcome.result
            output = error_body("tool_error", result.text) if result.is_error else result.text
        # What the model reads of it, as for any call: redacted and cut to max_tool_result_chars.
        output = fit_output(ctx.redact(output), self.max_result_chars)
        return RunPreamble(items=[call, FunctionCallOutput(call_id=call_id, output=output)])

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        route = self._routes.get(call.name)
        if route is None:
            return ToolResult.error("unknown_tool", f"No tool named '{call.name}' is available.")
        server, tool = route.server, route.tool.name
        meta: dict[str, Any] = {"server": server.id, "tool": tool}
        arguments = parse_arguments(call.arguments)
        if arguments is None:
            return ToolResult.error(
                "invalid_arguments",
                "The arguments must be a JSON object.",
                **meta,
                outcome=Outcome.INVALID_ARGUMENTS,
            )
        key = await self._cache_key(server, tool, arguments, ctx)
        if key is not None and (hit := await self.cache.get(key)) is not None:
            return ToolResult(output=hit["text"], meta={**meta, "cached": True, "outcome": Outcome.OK})

        outcome = await self.client.call(server, tool, arguments, ctx)
        meta["retries"] = outcome.retries
        if outcome.error is not None:
            error = outcome.error
            if isinstance(error, InputRequested):  # the tool asks the end user; the run pauses
                result = ToolResult.error(error.code or "input_requested", error.message, **meta)
                result.meta["input_round"] = error.round
                result.interrupt = Interruption(
                    message=error.question, data={"server": server.id, "input_request_id": error.request_id}
                )
                return result
            if isinstance(error, AuthorizationRequired):  # e.g. a refresh the server refused
                result = ToolResult.error(error.code or "authorization_required", error.message, **meta)
                result.interrupt = Interruption(
                    message=connect_message({server.id: error.link}),
                    data={"server": server.id, "authorization_required": True},
                )
                return result
            timed_out = isinstance(error, ToolTimeout) or (
                isinstance(error, ToolOutcomeUnknown) and error.timed_out
            )
            kind = Outcome.TIMEOUT if timed_out else Outcome.ERROR
            return ToolResult.error(error.code or "tool_error", error.message, **meta, outcome=kind)
        result = outcome.result
        assert result is not None
        if result.is_error:
            return ToolResult.error(
                "tool_error", result.text or "The tool failed.", **meta, outcome=Outcome.TOOL_ERROR
            )
        if key is not None:  # the cache may be Redis: store what the model reads, scrubbed
            seen = fit_output(ctx.redact(result.text), self.max_result_chars)
            await self.cache.set(key, {"text": seen}, self.cache_ttl_seconds)
        return ToolResult(output=result.text, meta={**meta, "outcome": Outcome.OK})

    async def _cache_key(
        self, server: McpServerConfig, tool: str, arguments: dict[str, Any], ctx: RunContext
    ) -> str | None:
        if self.cache_ttl_seconds <= 0:
            return None
        grant = await user_grant(server, self.client.credentials, ctx)
        if grant is False:
            return None
        return tool_result_key(server, tool, arguments, ctx, trusted=self.client.trusted, grant=grant)


async def user_grant(
    server: McpServerConfig, credentials: McpCredentials, ctx: RunContext
) -> str | bool | None:
    """What a cached result of a per-user server is filed under: the end user's current grant (False:
    they have none, nothing is cached or served from the cache); None for any other server."""
    if not server.auth.per_user:
        return None
    return await credentials.grant_version(server, requester_of(ctx)) or False


def tool_result_key(
    server: McpServerConfig,
    tool: str,
    arguments: dict[str, Any],
    ctx: RunContext,
    *,
    trusted: bool,
    prefix: str = "mcp:tool-result:",
    grant: str | None = None,
) -> str | None:
    """The cache key of one call's result: the server as this organisation and end user reach it,
    the tool, its arguments and the headers forwarded to it; None when those cannot be read."""
    try:
        forwarded = forwarded_headers(server.forward_headers, ctx.request_headers)
    except HatchwayError:
        return None
    # Forwarded headers (tenant, end-user token…) can change the answer, so they are part of it.
    material = [
        connection_key(server, ctx.org_id, trusted=trusted, user=ctx.on_behalf_of),
        tool,
        arguments,
        forwarded,
        grant,  # a per-user server's: revoked (or made again), the old results are out of reach
    ]
    digest = hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{prefix}{digest}"
