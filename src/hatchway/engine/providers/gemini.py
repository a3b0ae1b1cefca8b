"""A Google Gemini upstream (``providers[].type: gemini``): ``{base_url}/models/<model>:generateContent``
(``:streamGenerateContent?alt=sse`` for a stream) with ``x-goog-api-key``, on the gateway's pooled
HTTP client. The wire mapping is ``gemini_format``'s."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from hatchway.engine.providers.base import ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.gemini_format import ResponseAssembler, generate_body, model_path
from hatchway.engine.providers.openai_compat import upstream_error
from hatchway.engine.providers.pooled import PooledProvider, is_event_stream, retry_after_of
from hatchway.engine.providers.upstream_http import UpstreamError


class GeminiProvider(PooledProvider):
    """Talks to ``{base_url}/models/…`` (``base_url``: ``https://generativelanguage.googleapis.com/v1beta``)."""

    path = ""

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    async def request(self, req: ModelRequest) -> ModelResponse:
        content = orjson.dumps(generate_body(req))
        assembler = ResponseAssembler(self.id)
        try:
            async with await self._open(content, model_path(req.model, stream=False)) as response:
                status, raw = response.status, await response.read()
                wait = retry_after_of(response) if status >= 400 else None
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc
        if status >= 400:
            raise upstream_error(status, raw, self.secrets, wait)
        assembler.feed_json(raw)
        return assembler.response()

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        content = orjson.dumps(generate_body(req))
        assembler = ResponseAssembler(self.id)
        try:
            response = await self._open(content, model_path(req.model, stream=True))
            async with response:
                if response.status >= 400:
                    raise upstream_error(
                        response.status, await response.read(), self.secrets, retry_after_of(response)
                    )
                if not is_event_stream(response):  # a JSON array of chunks, or one reply
                    for event in self._whole(await response.read(), assembler):
                        yield event
                else:
                    async for line in response.lines():
                        for event in assembler.feed(line):
                            yield event
                yield StreamDone(assembler.response())
        except (TimeoutError, UpstreamError) as exc:
            raise self._transport_error(exc) from exc

    def _whole(self, raw: bytes, assembler: ResponseAssembler) -> list[StreamEvent]:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        chunks = value if isinstance(value, list) else [value]
        events: list[StreamEvent] = []
        for chunk in chunks:
            events += assembler.feed_json(orjson.dumps(chunk))
        return events
