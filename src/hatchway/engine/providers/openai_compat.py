"""Any OpenAI-compatible ``/chat/completions`` endpoint, on one pooled HTTP session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from hatchway.engine.providers.base import ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.chat_format import items_to_messages
from hatchway.engine.providers.chat_replies import (
    MAX_ERROR_SNIPPET,
    ChunkAssembler,
    completion_events,
    parse_completion,
)
from hatchway.engine.providers.pooled import PooledProvider, is_event_stream, retry_after_of
from hatchway.engine.providers.upstream_http import UpstreamError
from hatchway.errors import ProviderStatusError
from hatchway.observability.redaction import Redactor


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


class OpenAICompatProvider(PooledProvider):
    """Talks to ``{base_url}/chat/completions``."""

    async def request(self, req: ModelRequest) -> ModelResponse:
        content = orjson.dumps(build_body(req, stream=False))
        try:
            async with await self._open(content) as response:
                if response.status < 400 and is_event_stream(response):
                    # An upstream that streams whatever it was asked: the stream is the answer.
                    assembler = ChunkAssembler(self.id, self.secrets)
                    async for line in response.lines():
                        assembler.feed(line)
                    return assembler.finish()
                status, raw = response.status, await response.read()
                wait = retry_after_of(response) if status >= 400 else None
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc
        if status >= 400:
            raise upstream_error(status, raw, self.secrets, wait)
        return parse_completion(raw, self.id, self.secrets, response.content_type)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        content = orjson.dumps(build_body(req, stream=True))
        try:
            response = await self._open(content)
            async with response:
                if response.status >= 400:
                    raise upstream_error(
                        response.status, await response.read(), self.secrets, retry_after_of(response)
                    )
                if not is_event_stream(response):
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
