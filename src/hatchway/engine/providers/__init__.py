"""Upstream LLMs behind one interface."""

from hatchway.engine.providers.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from hatchway.engine.providers.openai_compat import OpenAICompatProvider
from hatchway.engine.providers.routing import ModelRouter, ResolvedModel

__all__ = [
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ModelRouter",
    "OpenAICompatProvider",
    "ResolvedModel",
    "StreamDone",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
]
