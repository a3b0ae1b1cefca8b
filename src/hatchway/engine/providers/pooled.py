"""What every provider that POSTs JSON to an upstream shares: its pooled HTTP client, its API key
(from the vault on first use, registered for redaction), and what its transport failures mean."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol

import orjson

from hatchway.engine.providers.base import ModelProvider, ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.chat_replies import MAX_ERROR_SNIPPET, completion_events
from hatchway.engine.providers.upstream_http import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamError,
    UpstreamPool,
    UpstreamProtocolError,
    UpstreamResponse,
)
from hatchway.errors import (
    HatchwayError,
    ProviderMalformed,
    ProviderStatusError,
    ProviderTimeout,
    ProviderUnavailable,
)
from hatchway.observability.log_redaction import SECRETS
from hatchway.redaction import Redactor

_CREDENTIAL_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie")
"""Extra provider headers whose values are credentials (``api-key``, ``x-goog-api-key``…): redacted."""


def upstream_error(
    status: int, body: bytes, secrets: Redactor, retry_after: float | None = None
) -> ProviderStatusError:
    """The error for an upstream's non-2xx answer, scrubbed of ``secrets`` (its API key, which some
    upstreams echo back from the ``Authorization`` header they refused) before anyone sees it.

    The parsed body is scrubbed string by string (whatever escaping the upstream used); a body that
    is not JSON is scrubbed whole before it is cut to a snippet, so no half of a key survives the cut.
    """
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        clean = secrets.redact_value(parsed)
        return ProviderStatusError(
            status,
            str(clean["error"].get("message") or f"upstream returned {status}"),
            body=clean,
            retry_after=retry_after,
        )
    snippet = secrets.redact(body.decode("utf-8", "replace")).strip()[:MAX_ERROR_SNIPPET].strip()
    message = f"The upstream returned HTTP {status}" + (f": {snippet}" if snippet else "")
    return ProviderStatusError(status, message, retry_after=retry_after)


class Assembler(Protocol):
    """Reads the lines of a ``text/event-stream`` answer into deltas, then the whole response."""

    def feed(self, line: bytes) -> list[StreamEvent]: ...

    def finish(self) -> ModelResponse: ...


class PooledProvider(ModelProvider):
    """An upstream reached at ``{base_url}{path}`` over a bounded pool of keep-alive connections.

    The pool (``upstream_http.UpstreamPool``) is created on first use, inside the running event loop.
    """

    path = "/chat/completions"
    """Appended to ``base_url``: where requests go."""

    def __init__(
        self,
        provider_id: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        connect_timeout: float = 5.0,
        max_connections: int = 200,
        headers: dict[str, str] | None = None,
        api_key_source: Callable[[], Awaitable[str]] | None = None,
        secrets: Redactor | None = None,
    ) -> None:
        """``api_key_source`` (a vault lookup) is awaited once, before the first request. The key is
        added to ``secrets`` (the router's, shared by its providers) and scrubbed from upstream errors."""
        self.id = provider_id
        self.secrets = secrets if secrets is not None else Redactor()
        self._key_source = api_key_source
        self._key_lock = asyncio.Lock()
        self.base_url = base_url.rstrip("/")
        self._url = self.base_url + self.path
        self._headers = {"content-type": "application/json", **self.fixed_headers(), **(headers or {})}
        for name, value in (headers or {}).items():
            if _CREDENTIAL_HEADER.search(name):
                self._register(value)
        if api_key:
            self._headers.update(self.key_headers(api_key))
            self._register(api_key)
        # The read timeout bounds the wait for each read (a slow first token or a stalled stream),
        # like the per-operation timeouts clients expect; a long, steadily streaming answer has no cap.
        self._timeouts = (connect_timeout, timeout)
        self._max_connections = max_connections
        self._pool: UpstreamPool | None = None

    # -- what each kind of upstream says differently -------------------------------------------

    def body(self, req: ModelRequest, *, stream: bool) -> bytes:
        raise NotImplementedError

    def request_path(self, req: ModelRequest, *, stream: bool) -> str | None:
        """Appended to the URL for this request (None: ``path`` as configured)."""
        return None

    def parse(self, raw: bytes, content_type: str) -> ModelResponse:
        """A whole (non-streamed) answer."""
        raise NotImplementedError

    def assembler(self) -> Assembler:
        raise NotImplementedError

    def whole_events(self, raw: bytes, content_type: str) -> list[StreamEvent]:
        """A whole answer to a streamed request (an upstream that ignored ``stream``), as events
        ending in ``StreamDone``."""
        return completion_events(self.parse(raw, content_type))

    # -- one call, whole or streamed ------------------------------------------------------------

    async def request(self, req: ModelRequest) -> ModelResponse:
        content = self.body(req, stream=False)
        try:
            async with await self._open(content, self.request_path(req, stream=False)) as response:
                if response.status < 400 and is_event_stream(response):
                    # An upstream that streams whatever it was asked: the stream is the answer.
                    assembler = self.assembler()
                    async for line in response.lines():
                        assembler.feed(line)
                    return assembler.finish()
                status, raw = response.status, await response.read()
                wait = retry_after_of(response) if status >= 400 else None
                content_type = response.content_type
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc
        if status >= 400:
            raise upstream_error(status, raw, self.secrets, wait)
        return self.parse(raw, content_type)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        content = self.body(req, stream=True)
        try:
            response = await self._open(content, self.request_path(req, stream=True))
            async with response:
                if response.status >= 400:
                    raw, wait = await response.read(), retry_after_of(response)
                    raise upstream_error(response.status, raw, self.secrets, wait)
                if not is_event_stream(response):
                    for event in self.whole_events(await response.read(), response.content_type):
                        yield event
                    return
                assembler = self.assembler()
                async for line in response.lines():
                    for event in assembler.feed(line):
                        yield event
                yield StreamDone(assembler.finish())
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc

    def fixed_headers(self) -> dict[str, str]:
        """Headers this kind of upstream always gets (an API version)."""
        return {}

    def key_headers(self, key: str) -> dict[str, str]:
        """How the API key is sent."""
        return {"authorization": f"Bearer {key}"}

    def _client(self) -> UpstreamPool:
        if self._pool is None:
            connect, read = self._timeouts
            self._pool = UpstreamPool(
                self._url,
                headers=self._headers,
                connect_timeout=connect,
                read_timeout=read,
                max_connections=self._max_connections,
            )
        return self._pool

    def _register(self, key: str) -> None:
        self.secrets.add(key)
        SECRETS.add(key)  # and out of third-party log lines

    async def _resolve_key(self) -> None:
        async with self._key_lock:
            if self._key_source is None:
                return
            try:
                key = await self._key_source()
            except HatchwayError as exc:
                raise ProviderUnavailable(f"The upstream '{self.id}' has no API key: {exc.message}") from None
            self._register(key)
            self._headers.update(self.key_headers(key))
            if self._pool is not None:
                try:
                    for name, value in self.key_headers(key).items():
                        self._pool.set_header(name, value)
                except ValueError as exc:  # names the header, never shows the key
                    raise ProviderUnavailable(f"The upstream '{self.id}' is misconfigured: {exc}") from None
            self._key_source = None

    async def _open(self, content: bytes, path: str | None = None) -> UpstreamResponse:
        """Send the request and wait for the response head (a stale pooled connection is retried)."""
        if self._key_source is not None:
            await self._resolve_key()
        try:
            return await self._client().post(content, path)
        except ValueError as exc:  # a header value with a line break (names it, never shows it)
            raise ProviderUnavailable(f"The upstream '{self.id}' is misconfigured: {exc}") from None

    def _transport_error(self, exc: BaseException) -> ProviderUnavailable | ProviderTimeout:
        if isinstance(exc, TimeoutError):
            return ProviderTimeout(f"The upstream '{self.id}' did not answer in time.")
        if isinstance(exc, UpstreamConnectError):
            return ProviderUnavailable(f"The upstream '{self.id}' is unreachable (refused or no route).")
        if isinstance(exc, UpstreamDisconnected):
            return ProviderUnavailable(
                f"The upstream '{self.id}' closed the connection before its answer ended."
            )
        if isinstance(exc, UpstreamProtocolError):  # its message names what, never the bytes
            return ProviderMalformed(f"The upstream '{self.id}' sent a response that cannot be read: {exc}.")
        return ProviderUnavailable(f"The upstream '{self.id}' failed ({type(exc).__name__}).")

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None


def retry_after_of(response: UpstreamResponse) -> float | None:
    """The answer's ``retry-after`` in seconds (a number, or an HTTP date), if it has one."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0) if when.tzinfo else None


def is_event_stream(response: UpstreamResponse) -> bool:
    return response.content_type.startswith("text/event-stream")
