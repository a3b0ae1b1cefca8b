"""An Anthropic Messages upstream (``providers[].type: anthropic``): ``{base_url}/messages`` with
``x-api-key`` and ``anthropic-version``, on the gateway's own pooled HTTP client (the path every
provider takes; the ``anthropic`` SDK's client would add its own pool and retries under ours).
The wire mapping is ``anthropic_format``'s."""

from __future__ import annotations

import orjson

from hatchway.engine.providers.anthropic_format import (
    ANTHROPIC_VERSION,
    EventAssembler,
    messages_body,
    parse_message,
)
from hatchway.engine.providers.base import ModelRequest, ModelResponse
from hatchway.engine.providers.pooled import PooledProvider


class AnthropicProvider(PooledProvider):
    """Talks to ``{base_url}/messages`` (``base_url``: ``https://api.anthropic.com/v1``)."""

    path = "/messages"

    def fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": ANTHROPIC_VERSION}

    def key_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def body(self, req: ModelRequest, *, stream: bool) -> bytes:
        return orjson.dumps(messages_body(req, stream=stream))

    def parse(self, raw: bytes, content_type: str) -> ModelResponse:
        return parse_message(raw, self.id)

    def assembler(self) -> EventAssembler:
        return EventAssembler(self.id)
