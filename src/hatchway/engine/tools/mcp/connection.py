"""One live MCP session to one server, owned by a background task and shared by every call.

The SDK's ``Client`` is an async context manager whose task groups must be entered and left by the
same task, and whose transport failures cancel that task. So each connection runs the client in a
task of its own: callers on any request's task send through ``session`` and are never cancelled by
a transport that dies; they see it as ``lost`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hatchway import __version__
from hatchway.config.plugin import McpServerConfig
from hatchway.engine.tools.mcp.http import RequestScope, scope_capabilities, scope_tasks, scoped_http_client
from hatchway.engine.tools.mcp.inputs import (
    CallInputs,
    answer_server_request,
    roots_answer,
    sample_for_server,
)
from hatchway.engine.tools.mcp.tasks import TASKS_EXTENSION, TasksExtension, with_tasks, without_tasks
from hatchway.errors import McpServerError
from hatchway.store.cache import Cache

logger = logging.getLogger(__name__)
T = TypeVar("T")

_CLIENT_INFO = types.Implementation(name="hatchway", version=__version__)
_CLOSE_GRACE_SECONDS = 5.0
_MAX_TOOL_PAGES = 50


class ConnectionLost(Exception):
    """The session ended (transport failure, server gone) while a call was waiting on it."""


class SessionEnded(ConnectionLost):
    """The session had already ended when a call was to be sent on it: nothing was sent."""


class ToolListing:
    """A server's ``tools/list``, shared by every replica through the cache, dropped on change or expiry.

    The shared entry lives ``ttl_seconds``; a ``tools/list_changed`` seen by any replica deletes it,
    so all of them list again. The last listing seen in this process outlives the entry on purpose:
    a server that is briefly unreachable keeps its tools in front of the model, whose calls then get
    a readable error instead of vanishing tools (``last_known`` serves them when listing again fails).
    """

    def __init__(self, cache: Cache, key: str, ttl_seconds: float) -> None:
        self.cache = cache
        self.key = key
        self.ttl_seconds = ttl_seconds
        self.lock = asyncio.Lock()
        """One listing at a time in this process (other replicas may list concurrently: harmless)."""
        self._tools: list[types.Tool] | None = None
        self._raw: list[Any] | None = None

    async def fresh(self) -> list[types.Tool] | None:
        """The shared listing while it lives; None when absent, expired or forgotten."""
        try:
            raw = await self.cache.get(self.key)
        except Exception as exc:  # the cache is a shortcut: without it the server is asked
            logger.warning("tool listing cache unavailable (%s)", type(exc).__name__)
            return None
        if not isinstance(raw, list):
            return None
        if raw != self._raw:  # parsed once per distinct listing, not per request
            try:
                self._tools = [types.Tool.model_validate(tool) for tool in raw]
            except ValueError:
                return None
            self._raw = raw
        return self._tools

    def last_known(self) -> list[types.Tool] | None:
        """The last listing seen here, however old; None after a ``tools/list_changed`` or before any."""
        return self._tools

    async def store(self, tools: list[types.Tool], server_ttl: float | None = None) -> None:
        """Keep the listing for ``ttl_seconds``, or less when the server promises less (2026-07-28
        ``ttlMs``).

        A ``ttlMs`` of 0 keeps ``ttl_seconds``: it is what the SDKs send for every server that
        chose nothing, and taken literally it would cost every run a listing round trip; change
        notifications still drop the listing at once. ``cacheScope`` needs nothing: listings are
        never shared beyond one organisation (and, for per-user servers, one end user).
        """
        raw = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
        self._tools, self._raw = tools, raw
        seconds = self.ttl_seconds
        if server_ttl is not None and server_ttl > 0:
            seconds = min(seconds, server_ttl)
        try:
            await self.cache.set(self.key, raw, seconds)
        except Exception as exc:
            logger.warning("tool listing cache unavailable (%s)", type(exc).__name__)

    async def forget(self) -> None:
        self._tools = self._raw = None
        try:
            await self.cache.delete(self.key)
        except Exception as exc:
            logger.warning("tool listing cache unavailable (%s)", type(exc).__name__)


class McpConnection:
    """A client session to one MCP server, sharing the server's ``ToolListing``."""

    def __init__(
        self,
        server: McpServerConfig,
        listing: ToolListing,
        *,
        guard: bool,
        max_answer_bytes: int | None = None,
        on_tools_changed: Callable[[McpServerConfig], Awaitable[None]] | None = None,
    ) -> None:
        self.server = server
        self.on_tools_changed = on_tools_changed
        self.listing = listing
        self.guard = guard
        self.max_answer_bytes = max_answer_bytes
        """Check and pin every address this session connects to (servers from inline plugins)."""
        self.lost = asyncio.Event()
        """Set once the session has ended; the pool then replaces the connection."""
        self._client: Client | None = None
        self.calls: list[CallInputs] = []
        """Calls in flight that may be asked for input by the server (see ``answering``)."""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start connecting in the background task; ``ready()`` waits for the outcome.

        The task starts in a copy of the caller's context, so the handshake and the session's own
        background requests carry the headers of the call that opened it. After that call's token
        has been refreshed, a background stream that reconnects (a notification stream) still
        sends it and is refused: change notifications then stop and the listing falls back to its
        TTL. Calls and listings always carry their own fresh credentials, so tools never vanish.
        """
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        # Every caller may have stopped waiting (their own timeouts) before it fails: its failure is
        # theirs to see, not an "exception never retrieved" for the log.
        self._ready.add_done_callback(lambda ready: ready.cancelled() or ready.exception())
        context = contextvars.copy_context()
        self._task = loop.create_task(self._own(self._ready), name=f"mcp:{self.server.id}", context=context)

    async def ready(self) -> None:
        """Wait until the session is usable; raises McpServerError when connecting failed."""
        assert self._ready is not None, "start() first"
        # A caller that times out stops waiting; the connection keeps opening for the next one.
        await asyncio.shield(self._ready)

    @property
    def client(self) -> Client:
        """The SDK client of this session; ConnectionLost once it has ended."""
        if self._client is None or self.lost.is_set():
            raise SessionEnded(f"{self.server.id}: the session has ended")
        return self._client

    @property
    def protocol_version(self) -> str | None:
        return self._client.protocol_version if self._client is not None else None

    @property
    def offers_tasks(self) -> bool:
        """Whether the server advertises the MCP tasks extension (a 2026-07-28 session's discovery)."""
        client = self._client
        if client is None or client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        extensions = getattr(client.server_capabilities, "extensions", None) or {}
        return TASKS_EXTENSION in extensions

    async def close(self) -> None:
        """End the session and wait (briefly) for its task."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), _CLOSE_GRACE_SECONDS)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _own(self, ready: asyncio.Future[None]) -> None:
        http = self._http_client() if self.server.kind == "streamable_http" else None
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    self._transport(http),
                    mode="auto",
                    cache=None,
                    client_info=_CLIENT_INFO,
                    message_handler=self._on_message,
                    # Handshake-era servers ask during a call; the call's answerer replies (inputs.py).
                    elicitation_callback=self._elicit,
                    list_roots_callback=self._roots,
                    # Declared so servers may ask; answered only for plugins with agent.allow_sampling.
                    sampling_callback=self._sample,
                    # Tasks (SEP-2663): ``tools/call`` may answer with a task the caller follows
                    # (task_calls.py); each call's scope says whether it declares the extension.
                    extensions=[TasksExtension()] if self.server.tasks != "off" else None,
                )
                # A server that accepts the connection but never answers must not leave a
                # half-open session that every later call waits on.
                async with asyncio.timeout(self.server.timeout_ms / 1000):
                    await stack.enter_async_context(client)
                declare_scope_capabilities(client)
                self._client = client
                ready.set_result(None)
                await self._serve(client)
        except BaseException as exc:  # the transport's task groups raise groups; all mean "gone"
            if not ready.done():
                ready.set_exception(
                    McpServerError(
                        f"{self.server.id}: cannot connect ({_describe(exc)})",
                        code="mcp_unreachable",
                        transient=True,
                    )
                )
            elif not self._stop.is_set():
                logger.info("MCP session to %s ended: %s", self.server.id, _describe(exc))
        finally:
            self.lost.set()
            self._client = None
            if http is not None:  # the SDK closes only the clients it created itself
                with contextlib.suppress(Exception):
                    await http.aclose()

    async def _serve(self, client: Client) -> None:
        """Wait for close; meanwhile follow ``tools/list_changed`` on modern sessions."""
        caps = client.server_capabilities.tools
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS and caps is not None and caps.list_changed:
            listener = asyncio.create_task(self._listen(client))
            try:
                await self._stop.wait()
            finally:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener
        else:
            await self._stop.wait()

    async def _listen(self, client: Client) -> None:
        # 2026-era servers deliver change notifications only on a subscriptions/listen stream.
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self.listing.forget()
        except Exception as exc:  # no subscription: the listing still expires on its TTL
            logger.debug("MCP %s: no tools/list_changed subscription (%s)", self.server.id, _describe(exc))

    @contextlib.contextmanager
    def answering(self, call: CallInputs) -> Any:
        """While the block runs, the server's input requests on this session may go to ``call``."""
        self.calls.append(call)
        try:
            yield
        finally:
            self.calls.remove(call)

    async def _elicit(self, _context: Any, params: Any) -> Any:
        return await answer_server_request(
            list(self.calls), types.ElicitRequest(method="elicitation/create", params=params)
        )

    async def _sample(self, _context: Any, params: Any) -> Any:
        return await sample_for_server(
            list(self.calls), types.CreateMessageRequest(method="sampling/createMessage", params=params)
        )

    async def _roots(self, _context: Any) -> Any:
        return roots_answer()

    async def _on_message(self, message: Any) -> None:
        # Handshake-era servers push notifications/tools/list_changed on the session's stream.
        if isinstance(message, types.ToolListChangedNotification):
            await self.listing.forget()
            if self.on_tools_changed is not None:
                await self.on_tools_changed(self.server)

    def _transport(self, http: httpx2.AsyncClient | None) -> Any:
        server = self.server
        if server.kind == "stdio":
            return stdio_client(StdioServerParameters(command=server.command or "", args=list(server.args)))
        assert server.url is not None
        if server.kind == "sse":
            return sse_client(server.url, httpx_client_factory=self._sse_http_client)
        return streamable_http_client(server.url, http_client=http)

    def _sse_http_client(
        self, headers: Any = None, timeout: Any = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        client = self._http_client()
        if headers:
            client.headers.update(headers)
        if timeout is not None:
            client.timeout = timeout
        return client

    def _http_client(self) -> httpx2.AsyncClient:
        return scoped_http_client(guard=self.guard, max_answer_bytes=self.max_answer_bytes)

    # -- calls -----------------------------------------------------------------------------------

    async def run(self, operation: Callable[[Client], Awaitable[T]], scope: RequestScope) -> T:
        """Run ``operation`` on the session; stop waiting when the session or its HTTP request fails.

        Raises SessionEnded, before sending anything, when the session has already ended."""
        call = asyncio.ensure_future(operation(self.client))
        lost = asyncio.ensure_future(self.lost.wait())
        failed = asyncio.ensure_future(scope.failed.wait())
        try:
            await asyncio.wait({call, lost, failed}, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                return call.result()
            if failed.done():
                # Give the SDK a moment to deliver the error it derives from the same response.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(call), 0.05)
                if call.done():
                    return call.result()
                raise ConnectionLost(f"{self.server.id}: the request failed")
            raise ConnectionLost(f"{self.server.id}: the session ended during the call")
        finally:
            for task in (call, lost, failed):
                if not task.done():
                    task.cancel()
            await asyncio.gather(call, lost, failed, return_exceptions=True)

    async def tools(self, scope: RequestScope) -> list[types.Tool]:
        """The server's tools, from the shared listing while it is fresh."""
        async with self.listing.lock:
            tools = await self.listing.fresh()
            if tools is None:
                tools, server_ttl = await self.run(_list_all_tools, scope)
                await self.listing.store(tools, server_ttl)
            return tools


async def _list_all_tools(client: Client) -> tuple[list[types.Tool], float | None]:
    """Every page of the listing, and the shortest ``ttlMs`` a page gave (None: none said)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    ttl: float | None = None
    for _ in range(_MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        if "ttl_ms" in page.model_fields_set:  # a 2026-07-28 CacheableResult said how long it holds
            seconds = getattr(page, "ttl_ms", 0) / 1000
            ttl = seconds if ttl is None else min(ttl, seconds)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools, ttl


def _describe(exc: BaseException) -> str:
    """The innermost meaningful message of a (possibly grouped) exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def declare_scope_capabilities(client: Client) -> None:
    """On a 2026-07-28 session, let each request declare its call's client capabilities in its ``_meta``.

    A call made for an MCP endpoint's client passes that client's capabilities to its
    ``PluginMcpClient``, which puts them in the call's ``RequestScope`` (``http.py``); its requests
    then declare them instead of the gateway's, and the upstream asks only for what that client can
    answer. The SDK stamps every request with the capabilities the session was built with and has no
    per-request override, so its stamp (``ClientSession._stamp``, set once at discovery) is wrapped
    here; without the attribute (another SDK release) the gateway's own capabilities are declared."""
    session = client.session
    stamp = getattr(session, "_stamp", None)
    if stamp is None or client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return

    def declaring(data: dict[str, Any], opts: Any) -> None:
        stamp(data, opts)
        declared = scope_capabilities()
        meta = (data.get("params") or {}).get("_meta")
        if not isinstance(meta, dict):
            return
        if declared is not None:
            meta[CLIENT_CAPABILITIES_META_KEY] = declared
        tasks = scope_tasks()
        if tasks is not None and data.get("method") == "tools/call":
            current = meta.get(CLIENT_CAPABILITIES_META_KEY)
            meta[CLIENT_CAPABILITIES_META_KEY] = with_tasks(current) if tasks else without_tasks(current)

    session._stamp = declaring  # a private attribute: see the docstring
