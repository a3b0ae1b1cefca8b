"""A Google Gemini upstream (``providers[].type: gemini``): ``{base_url}/models/<model>:generateContent``
(``:streamGenerateContent?alt=sse`` for a stream) with ``x-goog-api-key``, on the gateway's pooled
HTTP client. The wire mapping is ``gemini_format``'s."""

from __future__ import annotations

import orjson

from hatchway.engine.providers.base import ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.providers.gemini_format import ResponseAssembler, generate_body, model_path
from hatchway.engine.providers.pooled import PooledProvider


class GeminiProvider(PooledProvider):
    """Talks to ``{base_url}/models/…`` (``base_url``: ``https://generativelanguage.googleapis.com/v1beta``)."""

    path = ""

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def body(self, req: ModelRequest, *, stream: bool) -> bytes:
        return orjson.dumps(generate_body(req))  # the same body: the path says whether to stream

    def request_path(self, req: ModelRequest, *, stream: bool) -> str:
        return model_path(req.model, stream=stream)

    def parse(self, raw: bytes, content_type: str) -> ModelResponse:
        assembler = self.assembler()
        assembler.feed_json(raw)
        return assembler.finish()

    def assembler(self) -> ResponseAssembler:
        return ResponseAssembler(self.id)

    def whole_events(self, raw: bytes, content_type: str) -> list[StreamEvent]:
        """A JSON array of chunks (``streamGenerateContent`` without ``alt=sse``), or one reply."""
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        assembler = self.assembler()
        events: list[StreamEvent] = []
        for chunk in value if isinstance(value, list) else [value]:
            events += assembler.feed_json(orjson.dumps(chunk))
        return [*events, StreamDone(assembler.finish())]
