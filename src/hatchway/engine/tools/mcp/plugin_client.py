"""The MCP client of one plugin bound to one run: sessions from the pool, credentials, forwarded
headers, per-server timeouts and retries. It is the run's ``McpToolCaller`` (``PluginPart.client``), so
operations call validators and tools with exactly the behaviour the loop's own calls get.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.config.settings import McpTaskSettings
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpCallResult
from hatchway.engine.tools.mcp.connection import ConnectionLost, McpConnection, SessionEnded
from hatchway.engine.tools.mcp.credentials import McpCredentials, requester_of
from hatchway.engine.tools.mcp.delivery import is_idempotent, may_have_reached, outcome_unknown
from hatchway.engine.tools.mcp.forwarding import forwarded_headers
from hatchway.engine.tools.mcp.http import (
    AnswerTooLarge,
    EgressDenied,
    RequestScope,
    failed_before_sending,
    request_scope,
)
from hatchway.engine.tools.mcp.inputs import CallInputs, InputAnswerer, call_tool_with_inputs
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.engine.tools.mcp.results import to_call_result
from hatchway.engine.tools.mcp.task_calls import FollowedTask, TaskFollower
from hatchway.engine.tools.mcp.task_ledger import TaskLedger
from hatchway.engine.tools.mcp.tasks import CreateTaskResult, declares_tasks
from hatchway.errors import (
    AuthorizationRequired,
    HatchwayError,
    McpAuthError,
    McpServerError,
    ToolError,
    ToolTimeout,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")
Operation = Callable[[McpConnection, RequestScope], Awaitable[T]]

_MAX_BACKOFF_SECONDS = 2.0


@dataclass(slots=True)
class RetriedCall:
    """One logical tool call after its retries: a result (maybe the tool's own error) or a failure."""

    result: McpCallResult | None
    error: ToolError | None
    retries: int
    task: CreateTaskResult | None = None
    """With ``follow_tasks=False``: the task the server made of the call, for the caller to hand on."""


class _Unauthorized(Exception):
    """The server answered 401: the credentials are refreshed and the attempt repeated once."""

    def __init__(self, refused: dict[str, str]) -> None:
        super().__init__("HTTP 401")
        self.refused = refused
        """The headers the server turned down (so only that token is invalidated)."""


class _Failed(Exception):
    def __init__(self, error: ToolError, retries: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.retries = retries


class PluginMcpClient:
    """Calls the servers of one plugin for one run; satisfies ``McpToolCaller``."""

    def __init__(
        self,
        plugin: PluginConfig,
        *,
        trusted: bool,
        pool: McpServerPool,
        credentials: McpCredentials,
        guard_egress: bool = False,
        backoff_seconds: float = 0.1,
        answerer: InputAnswerer | None = None,
        sampler: Any = None,
        capabilities: dict[str, Any] | None = None,
        tasks: TaskLedger | None = None,
        task_settings: McpTaskSettings | None = None,
        task_resumes: bool = False,
    ) -> None:
        self.plugin = plugin
        self.answerer = answerer
        """Answers a tool's requests for input (MRTR); None: such a call fails with a clear error."""
        self.capabilities = capabilities
        """The client capabilities its requests declare upstream: an MCP endpoint's client's, for the
        calls, listings and reads made on its behalf (the upstream then asks only for input that
        client can give); None: the gateway's own."""
        self.sampler = sampler
        """Answers the servers' sampling requests (``RunSampler``) when the plugin allows it."""
        self.trusted = trusted
        """True for plugins from hatchway.yaml, False for inline ones (passed to the credentials)."""
        self.pool = pool
        self.credentials = credentials
        self.guard_egress = guard_egress
        """Refuse (and pin) addresses at connect time too: inline plugins without allow_private."""
        self.backoff_seconds = backoff_seconds
        self.tasks = TaskFollower(self, tasks, task_settings or McpTaskSettings(), resumes=task_resumes)
        """Follows the calls a server runs as MCP tasks (``task_calls.py``); ``tasks`` (the ledger)
        makes them durable: None (the probe, tests) follows them in memory only."""

    def has_server(self, server_id: str) -> bool:
        return self.plugin.server(server_id) is not None

    def server(self, server_id: str) -> McpServerConfig:
        server = self.plugin.server(server_id)
        if server is None:
            raise McpServerError(f"the bound plugin has no MCP server '{server_id}'", code="unknown_server")
        return server

    async def list_tools(self, server: McpServerConfig, ctx: RunContext) -> list[types.Tool]:
        """The server's tools (all of them; the toolset applies the allowlist)."""
        listing = self.pool.listing(server, ctx.org_id, trusted=self.trusted, user=ctx.on_behalf_of)
        cached = await listing.fresh()
        if cached is not None:  # no session needed, even when the server is briefly away
            return cached
        try:
            tools, _ = await self._with_retries(server, ctx, lambda conn, scope: conn.tools(scope))
        except _Failed as failed:
            # The listing expired while the server (or its token endpoint) is failing: keep its
            # tools in front of the model, whose calls then get the error, rather than drop them.
            known = listing.last_known()
            if known is None:
                raise failed.error from None
            logger.warning(
                "MCP server %s: listing again failed (%s); kept its last tools",
                server.id,
                ctx.redact(failed.error.message),
            )
            return known
        return tools

    async def call(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        *,
        meta: dict[str, Any] | None = None,
        at_most_once: bool = False,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
        input_round: int = 1,
        progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
        task_id: str | None = None,
        follow_tasks: bool = True,
    ) -> RetriedCall:
        """Call ``tool``; failures are retried when that is safe, the tool's own ``isError`` never.

        A failure that may have reached the tool is retried only for an idempotent tool (see
        ``delivery.py``), and with ``at_most_once`` (an operation's execution) not even then. A call
        the server runs as a task is followed to its end (``task_calls.py``); ``task_id`` resumes
        such a call whose task asked the end user (``input_responses`` are then sent to the task).
        """
        if task_id is not None:
            return await self._follow_task(server, tool, arguments, ctx, task_id, input_responses, progress)
        call = self.tasks.identity(server, tool, arguments, ctx)
        resumed = await self.tasks.resumable(call)
        if resumed is not None:  # a run of this response before this one started it: follow it
            return await self._followed(server, tool, arguments, ctx, resumed, None, progress)
        listed = self.pool.listing(
            server, ctx.org_id, trusted=self.trusted, user=ctx.on_behalf_of
        ).last_known()
        at_most_once = at_most_once or not is_idempotent(server, tool, listed)
        unasked = False  # a task the call did not declare the extension for

        async def operation(
            conn: McpConnection, scope: RequestScope
        ) -> McpCallResult | FollowedTask | CreateTaskResult:
            nonlocal unasked
            scope.tasks = self._declares_tasks(conn, server, tool)

            async def send(client: Client) -> types.CallToolResult | CreateTaskResult:
                with conn.answering(CallInputs(server.id, tool, self.answerer, self.sampler, ctx)):
                    return await call_tool_with_inputs(
                        client,
                        tool,
                        arguments,
                        server_id=server.id,
                        answerer=self.answerer,
                        meta=meta,
                        input_responses=input_responses,
                        request_state=request_state,
                        ctx=ctx,
                        first_round=input_round,
                        server_url=server.url or server.command,
                        sampler=self.sampler,
                        progress=progress,
                    )

            answer = await conn.run(send, scope)
            if isinstance(answer, CreateTaskResult):
                unasked = not (scope.tasks if scope.tasks is not None else declares_tasks(self.capabilities))
                if unasked or not follow_tasks:
                    return answer
                return await self.tasks.started(server, tool, call, answer, ctx)  # recorded first
            return to_call_result(answer)

        try:
            result, retries = await self._with_retries(server, ctx, operation, at_most_once=at_most_once)
        except _Failed as failed:
            return RetriedCall(result=None, error=failed.error, retries=failed.retries)
        if isinstance(result, CreateTaskResult) and unasked:
            return await self._unasked(server, result, ctx, retries)
        if isinstance(result, CreateTaskResult):
            return RetriedCall(result=None, error=None, retries=retries, task=result)
        if isinstance(result, FollowedTask):
            followed = await self._followed(server, tool, arguments, ctx, result, None, progress)
            followed.retries += retries
            return followed
        return RetriedCall(result=result, error=None, retries=retries)

    def _declares_tasks(self, conn: McpConnection, server: McpServerConfig, tool: str) -> bool | None:
        """Whether this call declares the tasks extension: as an MCP endpoint's client does (None:
        its capabilities already say), else when the server has it or the plugin marks the tool."""
        if self.capabilities is not None or server.tasks == "off":
            return None if self.capabilities is not None else False
        return conn.offers_tasks or any(fnmatch.fnmatchcase(tool, glob) for glob in server.task_tools)

    async def _unasked(
        self, server: McpServerConfig, created: CreateTaskResult, ctx: RunContext, retries: int
    ) -> RetriedCall:
        """A task made of a call that did not declare the extension (SEP-2663 forbids it): nobody
        would poll it (an MCP endpoint's client that did not declare it cannot read one, and one past
        its organisation's open tasks must not get one), so it is cancelled and the call fails."""
        await self.tasks.abandon(server, created, ctx)
        error = McpServerError(
            f"{server.id}: the server answered with a task, which this call did not ask for",
            code="mcp_protocol_error",
        )
        return RetriedCall(result=None, error=error, retries=retries)

    async def _follow_task(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        task_id: str,
        input_responses: dict[str, Any] | None,
        progress: Any,
    ) -> RetriedCall:
        """A task's question answered on the end user's turn: its answer goes to the task."""
        task = await self.tasks.by_id(task_id, ctx)
        if task is None:
            error = ToolError(f"{server.id}: the tool's task is no longer known", code="mcp_task_unknown")
            return RetriedCall(result=None, error=error, retries=0)
        return await self._followed(server, tool, arguments, ctx, task, input_responses, progress)

    async def _followed(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        task: FollowedTask,
        input_responses: dict[str, Any] | None,
        progress: Any,
    ) -> RetriedCall:
        try:
            result = await self.tasks.follow(
                server, tool, arguments, task, ctx, input_responses=input_responses, progress=progress
            )
        except ToolError as error:
            return RetriedCall(result=None, error=error, retries=0)
        return RetriedCall(result=result, error=None, retries=0)

    async def learn_secrets(self, server: McpServerConfig, ctx: RunContext) -> None:
        """Resolve ``server``'s credentials so ``ctx`` redacts them from what it returns, though no
        request is made (a listing served from the cache used none)."""
        try:
            await self._headers(server, ctx)
        except ToolError:
            pass  # nothing resolved, nothing to redact

    async def request(
        self, server: McpServerConfig, ctx: RunContext, send: Callable[[Client], Awaitable[T]]
    ) -> T:
        """A read-only request on ``server``'s session (resources, prompts, completions, which an MCP
        endpoint passes through) with the same auth, timeout and retries as a call; raises ToolError."""

        async def operation(conn: McpConnection, scope: RequestScope) -> T:
            return await conn.run(send, scope)

        try:
            result, _ = await self._with_retries(server, ctx, operation)
        except _Failed as failed:
            raise failed.error from None
        return result

    async def call_mcp_tool(
        self,
        server_id: str,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        *,
        meta: dict[str, Any] | None = None,
        at_most_once: bool = False,
    ) -> McpCallResult:
        """``McpToolCaller``: raises ToolError after the server's retries; ``isError`` is returned."""
        outcome = await self.call(
            self.server(server_id), tool, arguments, ctx, meta=meta, at_most_once=at_most_once
        )
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None
        return outcome.result

    # -- attempts ------------------------------------------------------------------------------

    async def _with_retries(
        self, server: McpServerConfig, ctx: RunContext, op: Operation[T], *, at_most_once: bool = False
    ) -> tuple[T, int]:
        retries = 0
        reauthorized = False
        while True:
            try:
                return await self._attempt(server, ctx, op, at_most_once=at_most_once), retries
            except _Unauthorized as refused:
                if reauthorized:
                    error = McpServerError(
                        f"{server.id}: the server rejected the credentials (HTTP 401)",
                        code="mcp_unauthorized",
                    )
                    raise _Failed(error, retries) from None
                reauthorized = True
                await self.credentials.invalidate(server, requester_of(ctx), refused=refused.refused)
            except ToolError as error:
                if not _retryable(error) or retries >= server.max_retries or ctx.remaining() <= 0:
                    raise _Failed(error, retries) from None
                retries += 1
                await asyncio.sleep(self._backoff(retries, ctx))

    def _backoff(self, retry: int, ctx: RunContext) -> float:
        delay = min(self.backoff_seconds * 2 ** (retry - 1), _MAX_BACKOFF_SECONDS)
        delay += random.uniform(0, delay / 2)  # spread replicas retrying the same server
        return max(min(delay, ctx.remaining()), 0.0)

    async def _attempt(
        self, server: McpServerConfig, ctx: RunContext, op: Operation[T], *, at_most_once: bool = False
    ) -> T:
        headers = await self._headers(server, ctx)
        auth = await self._user_auth(server, ctx)
        timeout = max(min(server.timeout_ms / 1000, ctx.remaining()), 0.001)
        connection: McpConnection | None = None
        sent = False  # handed to an open session: from then on it may have reached the tool
        with request_scope(headers, auth, capabilities=self.capabilities) as scope:
            try:
                async with asyncio.timeout(timeout):
                    connection = await self.pool.connection(
                        server,
                        ctx.org_id,
                        trusted=self.trusted,
                        guard=self.guard_egress,
                        user=ctx.on_behalf_of,
                    )
                    sent = True
                    return await op(connection, scope)
            except TimeoutError:
                failure: ToolError = ToolTimeout(
                    f"{server.id}: no answer within {server.timeout_ms} ms", transient=True
                )
            except McpServerError as exc:  # could not connect
                failure = exc
            except SessionEnded as exc:  # gone before the call was sent
                failure = McpServerError(str(exc), code="mcp_connection_lost", transient=True)
                sent = False
            except ConnectionLost as exc:
                failure = McpServerError(str(exc), code="mcp_connection_lost", transient=True)
            except MCPError as exc:
                failure = _protocol_failure(server, exc)
            finally:
                if connection is not None:
                    self.pool.release(connection)
        # An SSE session does not survive a failed POST (the SDK's writer stops), a 401 included.
        if connection is not None and (server.kind == "sse" or connection.lost.is_set() or scope.error):
            await self.pool.discard(connection)
        if scope.auth_failure is not None:
            if connection is not None:
                await self.pool.discard(connection)
            raise user_auth_failure(server, scope.auth_failure, ctx)
        if scope.status == 401:
            raise _Unauthorized(headers)
        failure = _http_failure(server, scope) or failure
        if at_most_once and may_have_reached(failure, scope, sent=sent):
            raise outcome_unknown(failure)
        raise failure

    async def _user_auth(self, server: McpServerConfig, ctx: RunContext) -> Any:
        if not server.auth.per_user:
            return None
        try:
            return await self.credentials.user_auth(server, requester_of(ctx), trusted=self.trusted)
        except ToolError:
            raise
        except HatchwayError as exc:
            raise McpAuthError(f"{server.id}: {exc.message}", code=exc.code or "mcp_auth") from None

    async def _headers(self, server: McpServerConfig, ctx: RunContext) -> dict[str, str]:
        if server.kind == "stdio":
            return {}
        try:
            forwarded = forwarded_headers(server.forward_headers, ctx.request_headers)
            auth = await self.credentials.auth_headers(server, requester_of(ctx), trusted=self.trusted)
        except McpAuthError as exc:  # a token endpoint's words: scrubbed of every secret the run knows
            raise McpAuthError(ctx.redact(exc.message), code=exc.code, transient=exc.transient) from None
        except ToolError:
            raise
        except HatchwayError as exc:  # a missing secret, a bad header value: not worth retrying
            raise McpAuthError(f"{server.id}: {exc.message}", code=exc.code or "mcp_auth") from None
        return {**forwarded, **auth}


def user_auth_failure(server: McpServerConfig, failure: Exception, ctx: RunContext) -> ToolError:
    """What a failed per-user OAuth flow means for the call: the user must authorize, or it failed."""
    from hatchway.credentials.consent import AuthorizationPending

    if isinstance(failure, AuthorizationPending):
        return AuthorizationRequired(server.id, failure.link)
    if isinstance(failure, ToolError):
        return failure
    return McpAuthError(
        f"{server.id}: authorizing as the end user failed "
        f"({ctx.redact(str(failure)) or type(failure).__name__})",
        code="oauth_flow_failed",
    )


def _retryable(error: ToolError) -> bool:
    # A credential failure (vault, token endpoint) is final for this call: the token exchange has
    # its own timeout and single-flight, and retrying it per call would multiply its load.
    return error.transient and not isinstance(error, McpAuthError)


def _http_failure(server: McpServerConfig, scope: RequestScope) -> ToolError | None:
    """What the HTTP exchange itself says went wrong, when it says anything."""
    if isinstance(scope.error, AnswerTooLarge):
        return McpServerError(
            f"{server.id}: the answer is larger than {scope.error.limit} bytes (max_tool_result_bytes); "
            "it was not read. Ask for less (a filter, a page, fewer fields).",
            code="tool_result_too_large",
        )
    if isinstance(scope.error, EgressDenied):
        return McpServerError(f"{server.id}: {scope.error}; the connection was refused", code="egress_denied")
    if scope.error is not None:
        name = type(scope.error).__name__
        if failed_before_sending(scope.error):
            return McpServerError(
                f"{server.id}: cannot reach the server ({name})", code="mcp_unreachable", transient=True
            )
        return McpServerError(
            f"{server.id}: the connection failed during the call ({name})",
            code="mcp_connection_lost",
            transient=True,
        )
    if scope.status is not None and scope.status >= 500:
        return McpServerError(f"{server.id}: HTTP {scope.status}", code="mcp_http_error", transient=True)
    if scope.status in (403, 404):
        return McpServerError(f"{server.id}: HTTP {scope.status}", code="mcp_http_error")
    return None


def _protocol_failure(server: McpServerConfig, exc: MCPError) -> ToolError:
    if exc.code == REQUEST_TIMEOUT:
        return ToolTimeout(f"{server.id}: {exc.error.message}", transient=True)
    if exc.code == CONNECTION_CLOSED:
        return McpServerError(f"{server.id}: {exc.error.message}", code="mcp_connection_lost", transient=True)
    failure = McpServerError(f"{server.id}: {exc.error.message}", code="mcp_protocol_error")
    failure.rpc_error = exc.error  # what an MCP endpoint relays to its own client (code and data)
    return failure
