"""The provider interface: one request in, one response (or a stream of events) out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.items import FunctionCall, Item, ToolSpec, Usage


@dataclass(slots=True)
class ModelRequest:
    model: str
    """The provider's own model name."""
    items: list[Item]
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """Other OpenAI parameters passed through as given (temperature, max_tokens, response_format…)."""


@dataclass(slots=True)
class ModelResponse:
    text: str | None
    tool_calls: list[FunctionCall]
    finish_reason: str
    usage: Usage
    model: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    """Upstream fields worth passing on (``id``, ``system_fingerprint``…)."""
    priced_as: str | None = None
    """The price-table entry that priced the call (``usage.cost_usd``); None when its price is
    unknown (``engine/pricing.py``)."""
    served_by: str | None = None
    """``<provider id>/<upstream model>`` of the target that answered, for a model with several
    targets or fallbacks (``engine/providers/failover.py``)."""
    failed_attempts: list[dict[str, str]] = field(default_factory=list)
    """The attempts that failed before it: each ``{"target", "error"}``."""


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    call_id: str | None
    name: str | None
    arguments: str


@dataclass(slots=True)
class StreamDone:
    response: ModelResponse


StreamEvent = TextDelta | ToolCallDelta | StreamDone


class ModelProvider(ABC):
    """An upstream model endpoint."""

    id: str

    @abstractmethod
    async def request(self, req: ModelRequest) -> ModelResponse:
        """One completion."""

    @abstractmethod
    def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        """One completion as deltas, ending with ``StreamDone`` carrying the whole response."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
