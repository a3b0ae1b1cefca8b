"""The provider interface: one request in, one response (or a stream of events) out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, ToolSpec, Usage

OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""The three names a request may give its output limit by (OpenAI's two, the Responses API's)."""


def output_limit(params: Mapping[str, Any]) -> int | None:
    """The request's output limit: the largest of the fields it names (what its admission reserves,
    and what an upstream with one field of its own is sent), None when it names none. Reserving the
    smallest while sending the largest would let one request spend past its reservation."""
    given = [v for k in OUTPUT_LIMITS if isinstance(v := params.get(k), int) and not isinstance(v, bool)]
    return max(given) if given else None


MAX_TOKEN_COUNT = 2**53
TokenCount = Annotated[int, Field(ge=0, lt=MAX_TOKEN_COUNT)]
"""A usage figure as an upstream may report it: a non-negative integer below 2^53 (what a JSON number
holds exactly). Anything else — a negative count, one past 2^63 — is the upstream's malformed reply
(``upstream_malformed``, with the field path), never a cost, a credit or a 500."""


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


def offered_tools(req: ModelRequest) -> list[ToolSpec]:
    """The tools an upstream with no deferred loading is sent: every tool but a deferred one that
    no ``tool_reference`` of the conversation's tool results has loaded yet (what Anthropic's API
    does with ``defer_loading`` itself)."""
    if not any(t.deferred for t in req.tools):
        return req.tools
    loaded = {
        part.get("tool_name")
        for item in req.items
        if isinstance(item, FunctionCallOutput)
        for part in item.parts or ()
        if part.get("type") == "tool_reference"
    }
    return [t for t in req.tools if not t.deferred or t.name in loaded]


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

    def estimate_cost(self, model: str, usage: Usage) -> float | None:
        """What a call of ``model`` with ``usage`` would cost by the price table (None: unknown). For a
        call whose upstream never reported its usage (an abandoned stream's estimate)."""
        return None
