"""Any OpenAI-compatible ``/chat/completions`` endpoint, on one pooled HTTP session."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from hatchway.engine.providers.base import ModelProvider, ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.chat_format import items_to_messages
from hatchway.engine.providers.chat_replies import (
    MAX_ERROR_SNIPPET,
    ChunkAssembler,
    completion_events,
    parse_completion,
)
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
from hatchway.observability.redaction import Redactor

_CREDENTIAL_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie")
"""Extra provider headers whose values are credentials (``api-key``, ``x-goog-api-key``…): redacted."""


def build_body(req: ModelRequest, *, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = dict(req.params)
    body["model"] = req.model
    body["messages"] = items_to_messages(req.items)
    if req.tools:
        body["tools"] = [t.to_chat() for t in req.tools]
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.tool_choice is not None and req.tools:
        body["tool_choice"] = req.tool_choice
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    return body


def upstream_error(status: int, body: bytes, secrets: Redactor) -> ProviderStatusError:
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
            status, str(clean["error"].get("message") or f"upstream returned {status}"), body=clean
        )
    snippet = secrets.redact(body.decode("utf-8", "replace")).strip()[:MAX_ERROR_SNIPPET].strip()
    message = f"The upstream returned HTTP {status}" + (f": {snippet}" if snippet else "")
    return ProviderStatusError(status, message)


class OpenAICompatProvider(ModelProvider):
    """Talks to ``{base_url}/chat/completions`` over a bounded pool of keep-alive connections.

    The pool (``upstream_http.UpstreamPool``) is created on first use, inside the running event loop.
    """

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
        self._url = self.base_url + "/chat/completions"
        self._headers = {"content-type": "application/json", **(headers or {})}
        for name, value in (headers or {}).items():
            if _CREDENTIAL_HEADER.search(name):
                self._register(value)
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
            self._register(api_key)
        # The read timeout bounds the wait for each read (a slow first token or a stalled stream),
        # like the per-operation timeouts clients expect; a long, steadily streaming answer has no cap.
        self._timeouts = (connect_timeout, timeout)
        self._max_connections = max_connections
        self._pool: UpstreamPool | None = None

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
            self._headers["authorization"] = f"Bearer {key}"
            if self._pool is not None:
                try:
                    self._pool.set_header("authorization", f"Bearer {key}")
                except ValueError as exc:  # names the header, never shows the key
                    raise ProviderUnavailable(f"The upstream '{self.id}' is misconfigured: {exc}") from None
            self._key_source = None

    async def request(self, req: ModelRequest) -> ModelResponse:
        if self._key_source is not None:
            await self._resolve_key()
        content = orjson.dumps(build_body(req, stream=False))
        try:
            async with await self._open(content) as response:
                if response.status < 400 and _is_event_stream(response):
                    # An upstream that streams whatever it was asked: the stream is the answer.
                    assembler = ChunkAssembler(self.id, self.secrets)
                    async for line in response.lines():
                        assembler.feed(line)
                    return assembler.finish()
                status, raw = response.status, await response.read()
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc
        if status >= 400:
            raise upstream_error(status, raw, self.secrets)
        return parse_completion(raw, self.id, self.secrets, response.content_type)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self._key_source is not None:
            await self._resolve_key()
        content = orjson.dumps(build_body(req, stream=True))
        try:
            response = await self._open(content)
            async with response:
                if response.status >= 400:
                    raise upstream_error(response.status, await response.read(), self.secrets)
                if not _is_event_stream(response):
                    # An upstream that ignored ``stream: true``: its whole completion is the stream.
                    whole = parse_completion(
                        await response.read(), self.id, self.secrets, response.content_type
                    )
                    for event in completion_events(whole):
                        yield event
                    return
                assembler = ChunkAssembler(self.id, self.secrets)
                async for line in response.lines():
                    for event in assembler.feed(line):
                        yield event
                yield StreamDone(assembler.finish())
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc

    async def _open(self, content: bytes) -> UpstreamResponse:
        """Send the request and wait for the response head (a stale pooled connection is retried)."""
        try:
            return await self._client().post(content)
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


def _is_event_stream(response: UpstreamResponse) -> bool:
    return response.content_type.startswith("text/event-stream")
