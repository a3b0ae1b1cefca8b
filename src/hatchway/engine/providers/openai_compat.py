"""Any OpenAI-compatible ``/chat/completions`` endpoint, on one pooled ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson

from hatchway.engine.items import FunctionCall, Usage
from hatchway.engine.providers.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hatchway.engine.providers.chat_format import items_to_messages
from hatchway.errors import HatchwayError, ProviderStatusError, ProviderTimeout, ProviderUnavailable

# A pooled keep-alive connection the upstream closed while idle fails like this before any byte of
# the response arrives; the request never reached the model, so sending it once more is safe.
_STALE_CONNECTION = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


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


def parse_usage(data: dict[str, Any] | None) -> Usage:
    if not data:
        return Usage()
    details = data.get("prompt_tokens_details") or {}
    out_details = data.get("completion_tokens_details") or {}
    return Usage(
        prompt_tokens=int(data.get("prompt_tokens") or 0),
        completion_tokens=int(data.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        reasoning_tokens=int(out_details.get("reasoning_tokens") or 0),
    )


def parse_completion(data: dict[str, Any]) -> ModelResponse:
    choices = data.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        raise ProviderUnavailable("The upstream returned a completion without choices.")
    choice = choices[0]
    message = choice.get("message") or {}
    calls = [
        FunctionCall(
            call_id=c.get("id") or f"call_{i}",
            name=(c.get("function") or {}).get("name", ""),
            arguments=(c.get("function") or {}).get("arguments") or "",
        )
        for i, c in enumerate(message.get("tool_calls") or [])
    ]
    content = message.get("content")
    return ModelResponse(
        text=content if isinstance(content, str) else None,
        tool_calls=calls,
        finish_reason=choice.get("finish_reason") or ("tool_calls" if calls else "stop"),
        usage=parse_usage(data.get("usage")),
        model=data.get("model") or "",
        raw={k: data[k] for k in ("id", "created", "system_fingerprint", "service_tier") if k in data},
    )


def _error_message(status: int, body: bytes) -> tuple[str, dict[str, Any] | None]:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return str(parsed["error"].get("message") or f"upstream returned {status}"), parsed
    snippet = body[:200].decode("utf-8", "replace").strip()
    return f"The upstream returned HTTP {status}" + (f": {snippet}" if snippet else ""), None


class OpenAICompatProvider(ModelProvider):
    """Talks to ``{base_url}/chat/completions``."""

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
        transport: httpx.AsyncBaseTransport | None = None,
        api_key_source: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        """``api_key_source`` (a vault lookup) is awaited once, before the first request."""
        self.id = provider_id
        self._key_source = api_key_source
        self._key_lock = asyncio.Lock()
        self.base_url = base_url.rstrip("/")
        default_headers = {"content-type": "application/json", **(headers or {})}
        if api_key:
            default_headers["authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=default_headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport,
        )

    async def _resolve_key(self) -> None:
        async with self._key_lock:
            if self._key_source is None:
                return
            try:
                key = await self._key_source()
            except HatchwayError as exc:
                raise ProviderUnavailable(f"The upstream '{self.id}' has no API key: {exc.message}") from None
            self._client.headers["authorization"] = f"Bearer {key}"
            self._key_source = None

    async def request(self, req: ModelRequest) -> ModelResponse:
        if self._key_source is not None:
            await self._resolve_key()
        content = orjson.dumps(build_body(req, stream=False))
        for attempt in (1, 2):
            try:
                response = await self._client.post("/chat/completions", content=content)
                break
            except httpx.TimeoutException as exc:
                raise ProviderTimeout(f"The upstream '{self.id}' did not answer in time.") from exc
            except _STALE_CONNECTION as exc:
                if attempt == 2:
                    raise ProviderUnavailable(f"The upstream '{self.id}' closed the connection.") from exc
            except httpx.TransportError as exc:
                raise ProviderUnavailable(
                    f"The upstream '{self.id}' is unreachable ({type(exc).__name__})."
                ) from exc
        if response.status_code >= 400:
            message, body = _error_message(response.status_code, response.content)
            raise ProviderStatusError(response.status_code, message, body=body)
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise ProviderUnavailable(f"The upstream '{self.id}' returned a body that is not JSON.") from exc
        if not isinstance(data, dict):
            raise ProviderUnavailable(f"The upstream '{self.id}' returned an unexpected body.")
        return parse_completion(data)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self._key_source is not None:
            await self._resolve_key()
        content = orjson.dumps(build_body(req, stream=True))
        try:
            async with self._client.stream("POST", "/chat/completions", content=content) as response:
                if response.status_code >= 400:
                    message, body = _error_message(response.status_code, await response.aread())
                    raise ProviderStatusError(response.status_code, message, body=body)
                assembler = _StreamAssembler()
                async for line in response.aiter_lines():
                    for event in assembler.feed(line):
                        yield event
                yield StreamDone(assembler.finish())
        except httpx.TimeoutException as exc:
            raise ProviderTimeout(f"The upstream '{self.id}' did not answer in time.") from exc
        except httpx.TransportError as exc:
            raise ProviderUnavailable(
                f"The upstream '{self.id}' is unreachable ({type(exc).__name__})."
            ) from exc

    async def aclose(self) -> None:
        await self._client.aclose()


class _StreamAssembler:
    """Turns SSE lines of chat chunks into deltas and, at the end, one whole response."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, FunctionCall] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.model = ""
        self.raw: dict[str, Any] = {}
        self.saw_content = False

    def feed(self, line: str) -> list[StreamEvent]:
        if not line.startswith("data:"):
            return []
        payload = line[5:].strip()
        if not payload or payload == "[DONE]":
            return []
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ProviderUnavailable("The upstream sent a stream chunk that is not JSON.") from exc
        if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
            err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            raise ProviderUnavailable(f"The upstream failed mid-stream: {err.get('message')}")
        self.model = chunk.get("model") or self.model
        for key in ("id", "created", "system_fingerprint"):
            if key in chunk:
                self.raw[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = parse_usage(chunk["usage"])
        events: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                self.saw_content = True
                events.append(TextDelta(delta["content"]))
            for tc in delta.get("tool_calls") or []:
                events.append(self._tool_delta(tc))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def _tool_delta(self, tc: dict[str, Any]) -> ToolCallDelta:
        index = int(tc.get("index", len(self.calls)))
        fn = tc.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = FunctionCall(
                call_id=tc.get("id") or f"call_{index}", name="", arguments=""
            )
        if tc.get("id"):
            call.call_id = tc["id"]
        if fn.get("name"):
            call.name += fn["name"]
        args = fn.get("arguments") or ""
        call.arguments += args
        return ToolCallDelta(index=index, call_id=tc.get("id"), name=fn.get("name"), arguments=args)

    def finish(self) -> ModelResponse:
        calls = [self.calls[i] for i in sorted(self.calls)]
        return ModelResponse(
            text="".join(self.text) if self.saw_content else None,
            tool_calls=calls,
            finish_reason=self.finish_reason or ("tool_calls" if calls else "stop"),
            usage=self.usage,
            model=self.model,
            raw=self.raw,
        )
