"""Any OpenAI-compatible ``/chat/completions`` endpoint, on one pooled HTTP session."""

from __future__ import annotations

from typing import Any

import orjson

from hatchway.engine.providers.base import ModelRequest, ModelResponse, offered_tools
from hatchway.engine.providers.chat_format import items_to_messages
from hatchway.engine.providers.chat_replies import (
    ChunkAssembler,
    parse_completion,
)
from hatchway.engine.providers.pooled import PooledProvider


def build_body(req: ModelRequest, *, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = dict(req.params)
    body["model"] = req.model
    body["messages"] = items_to_messages(req.items)
    tools = offered_tools(req)
    if tools:
        body["tools"] = [t.to_chat() for t in tools]
        if req.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = req.parallel_tool_calls
    if req.tool_choice is not None and tools:
        body["tool_choice"] = req.tool_choice
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    else:
        body.pop("stream", None)
        body.pop("stream_options", None)
    return body


class OpenAICompatProvider(PooledProvider):
    """Talks to ``{base_url}/chat/completions``."""

    def body(self, req: ModelRequest, *, stream: bool) -> bytes:
        return orjson.dumps(build_body(req, stream=stream))

    def parse(self, raw: bytes, content_type: str) -> ModelResponse:
        return parse_completion(raw, self.id, self.secrets, content_type)

    def assembler(self) -> ChunkAssembler:
        return ChunkAssembler(self.id, self.secrets)
