"""An Anthropic Messages upstream (``providers[].type: anthropic``): ``{base_url}/messages`` with
``x-api-key`` and ``anthropic-version``, on the gateway's own pooled HTTP client (the path every
provider takes; the ``anthropic`` SDK's client would add its own pool and retries under ours).
The wire mapping is ``anthropic_format``'s."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from hatchway.engine.providers.anthropic_format import (
    ANTHROPIC_VERSION,
    EventAssembler,
    messages_body,
    parse_message,
)
from hatchway.engine.providers.base import ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.chat_replies import completion_events
from hatchway.engine.providers.openai_compat import upstream_error
from hatchway.engine.providers.pooled import PooledProvider, is_event_stream, retry_after_of
from hatchway.engine.providers.upstream_http import UpstreamError


class AnthropicProvider(PooledProvider):
    """Talks to ``{base_url}/messages`` (``base_url``: ``https://api.anthropic.com/v1``)."""

    path = "/messages"

    def fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    async def request(self, req: ModelRequest) -> ModelResponse:
        content = orjson.dumps(messages_body(req, stream=False))
        try:
            async with await self._open(content) as response:
                if response.status < 400 and is_event_stream(response):
                    return await _assembled(response.lines(), EventAssembler(self.id))
                status, raw = response.status, await response.read()
                wait = retry_after_of(response) if status >= 400 else None
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc
        if status >= 400:
            raise upstream_error(status, raw, self.secrets, wait)
        return parse_message(raw, self.id)

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        content = orjson.dumps(messages_body(req, stream=True))
        try:
            response = await self._open(content)
            async with response:
                if response.status >= 400:
                    raise upstream_error(
                        response.status, await response.read(), self.secrets, retry_after_of(response)
                    )
                if not is_event_stream(response):  # it ignored ``stream: true``: one whole message
                    whole = parse_message(await response.read(), self.id)
                    for event in completion_events(whole):
                        yield event
                    return
                assembler = EventAssembler(self.id)
                async for line in response.lines():
                    for event in assembler.feed(line):
                        yield event
                yield StreamDone(assembler.finish())
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc


async def _assembled(lines: AsyncIterator[bytes], assembler: EventAssembler) -> ModelResponse:
    async for line in lines:
        assembler.feed(line)
    return assembler.finish()
