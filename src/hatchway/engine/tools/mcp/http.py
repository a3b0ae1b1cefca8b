"""Per-call HTTP headers and outcomes on long-lived MCP sessions.

An MCP session outlives any one request, but its credentials and forwarded headers belong to the
call being made. The SDK sends each message's HTTP request in the context of the task that sent
the message, so the caller sets a ``RequestScope`` in a ContextVar and ``ScopedTransport`` (under
the SDK's httpx2 client) adds the scope's headers to the request and records what happened: the
status, or the transport error. That record is how a 401 or a 503 is told apart from a tool error,
which the SDK would otherwise report alike, and how a call that never left is told apart from one
that may have reached its tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import httpx2

from hatchway.egress import EgressRefused, Resolver, public_address, resolve_host

# Headers the MCP transport sets itself; a scope never overrides them.
_TRANSPORT_HEADERS = frozenset(
    {
        "accept",
        "content-type",
        "content-length",
        "host",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
_FAILURE_STATUSES = frozenset({401, 403, 404})
# Failures before a request's first byte is written: no connection was made (refused, unreachable,
# no route, a TLS handshake that failed, an address the egress rule refused) or none came free in
# the pool. Every other transport error comes after the request may have been written, a write
# error included: httpcore reads on after one (the server may have answered), and reports that.
_UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


@dataclass
class RequestScope:
    """The headers for, and the HTTP outcome of, the MCP requests made within one call."""

    headers: dict[str, str] = field(default_factory=dict)
    status: int | None = None
    """The status of the last HTTP response seen in this scope."""
    error: Exception | None = None
    """The transport error (connect, read…) of the last request that failed before any response."""
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on a transport error, a 5xx or a 401/403/404: the answer will not come."""
    auth: httpx2.Auth | None = None
    """Authenticates the scope's requests as the end user (per-user OAuth); None: headers only."""
    auth_failure: Exception | None = None
    """Why ``auth`` could not authenticate (the user must authorize first, or the flow failed)."""
    capabilities: dict[str, Any] | None = None
    """The client capabilities the scope's requests declare (2026-07-28 ``_meta``) instead of the
    gateway's own: an MCP endpoint's client's, so the upstream asks only for what that client can
    answer (``connection.declare_scope_capabilities``). None: the gateway's."""
    tasks: bool | None = None
    """Whether the scope's requests declare the MCP tasks extension (``tasks.py``): True adds it to
    what they declare, False takes it out; None leaves the declared capabilities as they are."""
    reached: bool = False
    """Whether any request of this scope may have reached its server: it was answered, or it failed
    after its connection was open. False while every failure was a connection that never opened."""

    def record(self, status: int) -> None:
        self.status = status
        self.reached = True
        if status in (401, 403) and self.auth is not None:
            return  # the user's OAuth flow answers these itself (authorize, step up) and resends
        if status >= 500 or status in _FAILURE_STATUSES:
            self.failed.set()

    def fail(self, error: Exception) -> None:
        self.error = error
        if not failed_before_sending(error):
            self.reached = True
        self.failed.set()

    def never_sent(self) -> bool:
        """Whether the requests made in this scope provably never reached the server."""
        return self.error is not None and not self.reached


def failed_before_sending(error: Exception) -> bool:
    """Whether ``error`` came before any byte of its request was written."""
    return isinstance(error, _UNSENT)


_AUTH_REQUEST = "hatchway_auth_request"
MAX_AUTH_ANSWER_BYTES = 64 * 1024
"""An OAuth flow's answers (metadata, registration, token) are read no further than this."""
_current: ContextVar[RequestScope | None] = ContextVar("hatchway_mcp_request_scope", default=None)


@contextmanager
def request_scope(
    headers: dict[str, str],
    auth: httpx2.Auth | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
    tasks: bool | None = None,
) -> Iterator[RequestScope]:
    """Make ``headers`` (and ``auth``, and the declared ``capabilities`` and ``tasks``) apply to every
    MCP request sent from this task until the block ends."""
    scope = RequestScope(headers=dict(headers), auth=auth, capabilities=capabilities, tasks=tasks)
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def scope_capabilities() -> dict[str, Any] | None:
    """The client capabilities the MCP request being sent from this task declares (None: the
    gateway's own): its call's ``RequestScope``'s, read where the SDK stamps the request."""
    scope = _current.get()
    return scope.capabilities if scope is not None else None


def scope_tasks() -> bool | None:
    """Whether the MCP request being sent from this task declares the tasks extension (None: as the
    session does)."""
    scope = _current.get()
    return scope.tasks if scope is not None else None


class ScopedAuth(httpx2.Auth):
    """Runs the current scope's ``auth`` flow (per-user OAuth) on each request; a no-op without one.

    One MCP connection's HTTP client serves many calls; the flow that authenticates a call belongs
    to that call, like its headers. A failure of the flow (the user has not authorized yet, a
    metadata check refused) is recorded on the scope, which is how the caller tells it apart from
    a transport failure: the SDK reports both as a lost request.
    """

    async def async_auth_flow(self, request: httpx2.Request):  # type: ignore[no-untyped-def,override]
        scope = _current.get()
        auth = scope.auth if scope is not None else None
        if auth is None:
            yield request
            return
        flow = auth.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                if outgoing is not request:  # the flow's own: discovery, registration, token
                    outgoing.extensions = {**outgoing.extensions, _AUTH_REQUEST: True}
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except Exception as exc:
            assert scope is not None
            scope.auth_failure = exc
            scope.failed.set()
            raise
        finally:
            # Closed here, in the task that drove it: the flow holds a lock across its requests,
            # which only the task that took it may release (left to the garbage collector, it is not).
            await flow.aclose()


class EgressDenied(httpx2.ConnectError):
    """An untrusted server's host resolved to an address the gateway may not reach."""


class AnswerTooLarge(httpx2.ReadError):
    """An MCP server's answer passed ``max_tool_result_bytes``: it is not read further."""

    def __init__(self, limit: int, request: httpx2.Request) -> None:
        super().__init__(f"the server's answer is larger than {limit} bytes", request=request)
        self.limit = limit


class _CappedStream(httpx2.AsyncByteStream):
    """A response body read no further than ``limit`` bytes (the SDK reads answers whole)."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, request: httpx2.Request) -> None:
        self._inner = inner
        self._limit = limit
        self._request = request

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        total = 0
        scope = _current.get()
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._limit:
                error = AnswerTooLarge(self._limit, self._request)
                if scope is not None:
                    scope.fail(error)
                raise error
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class ScopedTransport(httpx2.AsyncBaseTransport):
    """Adds the current scope's headers to each request and records its outcome in the scope.

    With ``guard`` (servers from inline plugins) each host goes through the egress rule
    (``egress.py``) once and the connection is pinned to the checked address (TLS still
    verifies the name), so a DNS answer that changes after the check cannot steer the session inwards.
    """

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        *,
        guard: bool = False,
        resolver: Resolver = resolve_host,
        max_answer_bytes: int | None = None,
    ) -> None:
        self._inner = inner
        self._guard = guard
        self._resolve = resolver
        self._max_answer_bytes = max_answer_bytes
        """Caps the body of each answer to a request (POST): a tool result, a listing. The session's
        long-lived event stream (GET) is not an answer and is not capped."""
        self._pinned: dict[tuple[str, int], str] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        scope = _current.get()
        if request.extensions.get(_AUTH_REQUEST):
            # An OAuth flow's request (metadata, token endpoint): not the call's, so neither its
            # headers nor its outcome (a discovery 404 is a normal step) belong to the scope; the
            # egress rule still applies.
            scope = None
        if scope is not None:
            for name, value in scope.headers.items():
                if name.lower() not in _TRANSPORT_HEADERS:
                    request.headers[name] = value
        try:
            if self._guard:
                await self._pin(request)
            response = await self._inner.handle_async_request(request)
        except Exception as exc:
            if scope is not None:
                scope.fail(exc)
            raise
        if scope is not None:
            scope.record(response.status_code)
        limit = self._max_answer_bytes
        if request.extensions.get(_AUTH_REQUEST):  # metadata, registration, tokens: small documents
            limit = MAX_AUTH_ANSWER_BYTES
        if limit is not None and (request.method == "POST" or request.extensions.get(_AUTH_REQUEST)):
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                await response.aclose()
                error = AnswerTooLarge(limit, request)
                if scope is not None:
                    scope.fail(error)
                raise error
            response.stream = _CappedStream(response.stream, limit, request)  # type: ignore[arg-type]
        return response

    async def _pin(self, request: httpx2.Request) -> None:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        address = self._pinned.get((host, port))
        if address is None:
            try:
                checked = await public_address(host, port, resolver=self._resolve)
            except OSError as exc:
                raise httpx2.ConnectError(f"cannot resolve {host}: {exc}", request=request) from None
            except EgressRefused as refused:
                raise EgressDenied(str(refused), request=request) from None
            address = self._pinned[(host, port)] = str(checked)
        if address != host:
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": host}
            request.url = request.url.copy_with(host=address)

    async def aclose(self) -> None:
        await self._inner.aclose()


def scoped_http_client(*, guard: bool = False, max_answer_bytes: int | None = None) -> httpx2.AsyncClient:
    """The httpx2 client one MCP connection uses: scoped headers, no redirect following.

    The SDK follows same-origin redirects itself and refuses the rest; the read timeout is long
    because a server may hold an event stream open (per-call time limits are enforced above).
    """
    return httpx2.AsyncClient(
        transport=ScopedTransport(
            httpx2.AsyncHTTPTransport(trust_env=False), guard=guard, max_answer_bytes=max_answer_bytes
        ),
        timeout=httpx2.Timeout(30.0, read=300.0),
        auth=ScopedAuth(),
        follow_redirects=False,
        trust_env=False,
    )
