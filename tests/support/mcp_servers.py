"""Real MCP servers for tests: built with the official SDK (``MCPServer``), served by uvicorn on loopback.

    server = McpTestServer("search").with_standard_tools().start()
    server.url                         # http://127.0.0.1:PORT/mcp (or /sse with transport="sse")
    server.fail_next(2, status=503)    # the next 2 tools/call requests get HTTP 503
    server.tool_calls("echo")          # tools/call requests received for echo (failed ones included)
    server.requests                    # every HTTP request: headers, JSON-RPC method, tool, status sent

Add your own tools with ``@server.mcp.tool()``. ``required_bearer="tok"`` makes every request without
``Authorization: Bearer tok`` fail with 401. ``token_verifier=`` (an SDK ``TokenVerifier``) turns on
the SDK's own bearer authentication instead: the server then refuses (401) every request whose token
the verifier does not accept, and (403) tokens without ``required_scopes``. ``stdio_command()``
gives a command line that runs a stdio MCP server with the same standard tools.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from starlette.responses import JSONResponse, Response

from hatchway.credentials import Requester
from hatchway.errors import McpServerError
from tests.support.servers import ServerThread

STDIO_SERVER = Path(__file__).with_name("mcp_stdio_server.py")


@dataclass
class RecordedRequest:
    """One HTTP request the MCP server received."""

    http_method: str
    path: str
    headers: dict[str, str]
    rpc_method: str | None
    tool: str | None
    arguments: dict[str, Any] | None
    meta: dict[str, Any] | None
    """The JSON-RPC request's ``params._meta``."""
    status: int | None = None
    """The status injected by the test (503, 401…), or None when the MCP app answered."""
    answered: int | None = None
    """The status the server actually sent (injected, or the MCP app's own: 200, 401 from SDK auth…)."""


@dataclass
class _Failure:
    remaining: int
    status: int
    rpc_method: str | None


@dataclass
class McpTestServer:
    """An ``MCPServer`` over real HTTP that records what it receives and can be told to fail."""

    name: str = "test"
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    required_bearer: str | None = None
    token_verifier: TokenVerifier | None = None
    required_scopes: list[str] | None = None
    mcp: MCPServer = field(init=False)
    requests: list[RecordedRequest] = field(default_factory=list, init=False)
    executions: dict[str, int] = field(default_factory=dict, init=False)
    """How many times each standard tool actually ran."""
    spans: list[tuple[float, float]] = field(default_factory=list, init=False)
    """``(start, end)`` (``time.monotonic()``) of each ``slow`` execution, to see overlap."""

    def __post_init__(self) -> None:
        auth = None
        if self.token_verifier is not None:
            auth = AuthSettings(
                issuer_url="https://idp.invalid",  # type: ignore[arg-type]
                resource_server_url=None,
                required_scopes=self.required_scopes,
            )
        self.mcp = MCPServer(self.name, log_level="WARNING", token_verifier=self.token_verifier, auth=auth)
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []
        app = self.mcp.sse_app() if self.transport == "sse" else self.mcp.streamable_http_app()
        # A client's open event stream (GET stream, subscriptions/listen) would hold a graceful
        # shutdown forever; the servers are stopped by tests, so one second of grace is plenty.
        self.server = ServerThread(_Recorder(app, self), timeout_graceful_shutdown=1)

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{self.server.url}/sse" if self.transport == "sse" else f"{self.server.url}/mcp"

    def start(self) -> McpTestServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    # -- behaviour ---------------------------------------------------------------------------------

    def fail_next(self, count: int, *, status: int = 503, rpc_method: str | None = "tools/call") -> None:
        """Answer the next ``count`` requests for ``rpc_method`` (None: any request) with ``status``."""
        with self._lock:
            self._failures.append(_Failure(count, status, rpc_method))

    def with_standard_tools(self) -> McpTestServer:
        """``echo(text)``, ``slow(ms, label)``, ``fail(message)`` (an isError result), ``add(a, b)`` and
        ``grow()`` (adds a tool named ``extra`` and announces the change to listening clients)."""
        mcp = self.mcp

        @mcp.tool(description="Echo the text back.")
        async def echo(text: str) -> str:
            self._ran("echo")
            return f"echo:{text}"

        @mcp.tool(description="Wait ms milliseconds, then answer.")
        async def slow(ms: int, label: str = "") -> str:
            self._ran("slow")
            started = time.monotonic()
            await asyncio.sleep(ms / 1000)
            with self._lock:
                self.spans.append((started, time.monotonic()))
            return f"slept {ms} {label}".strip()

        @mcp.tool(description="Always fails with the given message (a tool error, isError=true).")
        async def fail(message: str = "it broke") -> str:
            self._ran("fail")
            raise ToolError(message)

        @mcp.tool(description="Add two integers.")
        async def add(a: int, b: int) -> int:
            self._ran("add")
            return a + b

        @mcp.tool(description="Add a tool named extra and announce the change.")
        async def grow(ctx: Context) -> str:
            self._ran("grow")
            if "extra" not in {t.name for t in await mcp.list_tools()}:
                mcp.add_tool(_extra, name="extra", description="Added at run time.")
            await ctx.notify_tools_changed()
            return "grown"

        return self

    def _ran(self, tool: str) -> None:
        with self._lock:
            self.executions[tool] = self.executions.get(tool, 0) + 1

    # -- what was received -------------------------------------------------------------------------

    def tool_calls(self, tool: str | None = None) -> int:
        """tools/call requests received (injected failures included), for ``tool`` or for any tool."""
        with self._lock:
            return sum(
                1 for r in self.requests if r.rpc_method == "tools/call" and (tool is None or r.tool == tool)
            )

    def calls_of(self, rpc_method: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.rpc_method == rpc_method]

    def bearers(self) -> list[str | None]:
        """The bearer token of every request received, in order (None: the request had none)."""
        with self._lock:
            headers = [r.headers.get("authorization", "") for r in self.requests]
        return [h[len("Bearer ") :] if h.startswith("Bearer ") else None for h in headers]

    def tool_call_headers(self, tool: str | None = None) -> list[dict[str, str]]:
        return [r.headers for r in self.calls_of("tools/call") if tool is None or r.tool == tool]

    def _record(self, request: RecordedRequest) -> int | None:
        with self._lock:
            for failure in self._failures:
                if failure.remaining > 0 and failure.rpc_method in (None, request.rpc_method):
                    failure.remaining -= 1
                    request.status = failure.status
                    break
            if request.status is None and self.required_bearer is not None:
                if request.headers.get("authorization") != f"Bearer {self.required_bearer}":
                    request.status = 401
            self.requests.append(request)
            return request.status


def _extra() -> str:
    return "extra!"


class _Recorder:
    """ASGI wrapper: records each request, answers injected failures, passes the rest on."""

    def __init__(self, app: Any, owner: McpTestServer) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Any, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages, body = [], b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        rpc = _json_rpc(body)
        params = rpc.get("params") or {}
        recorded = RecordedRequest(
            http_method=scope["method"],
            path=scope["path"],
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            rpc_method=rpc.get("method"),
            tool=params.get("name") if rpc.get("method") == "tools/call" else None,
            arguments=params.get("arguments") if rpc.get("method") == "tools/call" else None,
            meta=params.get("_meta"),
        )
        status = self.owner._record(recorded)

        async def noted(message: Any) -> None:
            if message["type"] == "http.response.start":
                recorded.answered = message["status"]
            await send(message)

        if status is not None:
            response: Response = (
                JSONResponse({"error": "unauthorized"}, status_code=status)
                if status == 401
                else Response("injected failure", status_code=status)
            )
            await response(scope, receive, noted)
            return
        replay = iter(messages)

        async def replayed() -> Any:
            try:
                return next(replay)
            except StopIteration:
                return await receive()

        await self.app(scope, replayed, noted)


def _json_rpc(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body) if body else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class StaticBearers:
    """An SDK ``TokenVerifier`` accepting fixed bearer values (API keys handed out of band)."""

    def __init__(self, *values: str) -> None:
        self.values = set(values)

    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in self.values:
            return None
        return AccessToken(token=token, client_id="key-holder", scopes=[])


class BearerCredentials:
    """A test double of the vault (``McpCredentials``): hands out bearer tokens in order.

    ``auth_headers`` returns ``Bearer <tokens[n]>`` where n is the number of ``invalidate`` calls so
    far, so ``BearerCredentials("stale", "fresh")`` answers with a token the server refuses first.
    """

    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)
        self.authorized: list[tuple[str, bool]] = []
        self.invalidated: list[str] = []
        self.requests = 0

    async def authorize(self, server: Any, who: Requester, *, trusted: bool) -> None:
        self.authorized.append((server.id, trusted))

    async def auth_headers(self, server: Any, who: Requester, *, trusted: bool) -> dict[str, str]:
        self.requests += 1
        token = self.tokens[min(len(self.invalidated), len(self.tokens) - 1)]
        who.add_secret(token)  # a run's redacts it in its logs too: tokens unlike any other test text
        return {"authorization": f"Bearer {token}"}

    async def invalidate(self, server: Any, who: Requester, *, refused: Any = None) -> None:
        self.invalidated.append(server.id)


def stdio_command() -> tuple[str, list[str]]:
    """``(command, args)`` that start a stdio MCP server offering echo and add."""
    return sys.executable, [str(STDIO_SERVER)]


class NoCredentials:
    """Credentials for servers with ``auth: {type: none}`` only (the pool's tests need no vault)."""

    async def authorize(self, server: Any, who: Requester, *, trusted: bool) -> None:
        return None

    async def auth_headers(self, server: Any, who: Requester, *, trusted: bool) -> dict[str, str]:
        auth = getattr(server, "auth", None)
        kind = getattr(auth, "type", "none") if auth is not None else "none"
        if kind != "none":
            raise McpServerError(
                f"auth type '{kind}' needs the vault, which is not configured", code="auth_unavailable"
            )
        return {}

    async def invalidate(
        self, server: Any, who: Requester, *, refused: Mapping[str, str] | None = None
    ) -> None:
        return None
