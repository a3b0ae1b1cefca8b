"""Canonical items the engine works on (Responses-style); adapters map their wire formats to these.

Message content is a string or a list of Responses-style parts (``input_text``, ``output_text``,
``input_image``…); part types the engine does not know are carried through untouched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Role = Literal["system", "developer", "user", "assistant"]
DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
"""An ``input_image`` given inline: its media type and base64 data."""


@dataclass(slots=True)
class Message:
    role: Role
    content: str | list[dict[str, Any]]
    id: str | None = None
    tainted_by: tuple[str, ...] = ()
    """The tools whose output this message carries in other words (a compaction's summary of them):
    untrusted as that output was (``engine/guards``). Never sent to a model."""

    @property
    def text(self) -> str:
        """The concatenated text of the content."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if "text" in p)


@dataclass(slots=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str
    id: str | None = None

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as an object, for the APIs that take one (Anthropic's ``input``, Gemini's
        ``args``): a model's invalid JSON as ``{"_raw": …}``, a non-object as ``{"value": …}``."""
        try:
            value = orjson.loads(self.arguments) if self.arguments else {}
        except orjson.JSONDecodeError:
            return {"_raw": self.arguments}
        return value if isinstance(value, dict) else {"value": value}


@dataclass(slots=True)
class FunctionCallOutput:
    call_id: str
    output: str
    """The result's text (its text blocks joined, when it came as blocks)."""
    id: str | None = None
    parts: list[dict[str, Any]] | None = None
    """The result as content parts, when it holds more than text (an image a client's tool read, a
    document, Anthropic's ``tool_reference`` or ``search_result`` blocks): each upstream gets what
    it can carry of them (``engine/providers``), never an empty output in their place."""
    is_error: bool = False
    """The tool failed or was refused (Anthropic's ``tool_result.is_error``)."""
    cache_control: dict[str, Any] | None = None
    """A prompt-cache breakpoint on the result (Anthropic's ``cache_control``), kept for upstreams
    that take one."""


Item = Message | FunctionCall | FunctionCallOutput


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    """Prompt tokens the upstream wrote to its prompt cache (``prompt_tokens_details``)."""
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    """What the calls cost in USD by the price table (``engine/pricing.py``), summed over the calls
    whose price is known."""
    unpriced_calls: int = 0
    """Model calls whose price is unknown: their tokens count above, their cost nowhere."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost(self) -> float | None:
        """The cost in USD, or None when a call's price is unknown (never a guess)."""
        return None if self.unpriced_calls else round(self.cost_usd, 10)

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cost_usd += other.cost_usd
        self.unpriced_calls += other.unpriced_calls

    def to_chat(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_tokens or self.cache_write_tokens:  # what the upstream reported, passed on
            usage["prompt_tokens_details"] = {
                "cached_tokens": self.cached_tokens,
                "cache_write_tokens": self.cache_write_tokens,
            }
        return usage


@dataclass(slots=True)
class ToolSpec:
    """A function tool as the model sees it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None
    from_mcp: bool = False
    """Its description is an MCP server's: a guarded run scans it (``engine/guards``)."""
    unpinned: bool = False
    """Its description is an MCP server's words that no approved pin vouches for (``tool_drift:
    allow``, or a drift kept under ``warn``): a guarded run spotlights it."""
    deferred: bool = False
    """The client's ``defer_loading``: its own tool search loads it when the model asks (Claude
    Code's ``ToolSearch``). A native Anthropic upstream is told so; one with no such notion is
    offered it once a ``tool_reference`` in the conversation has loaded it (``offered_tools``)."""

    def to_chat(self) -> dict[str, Any]:
        fn: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.strict is not None:
            fn["strict"] = self.strict
        return {"type": "function", "function": fn}


def output_sources(items: list[Item]) -> list[str]:
    """The tools whose output ``items`` hold, oldest first, each once: a tool result's call (by its
    call id), a message's ``tainted_by``. What a run given these items is tainted by."""
    names = {item.call_id: item.name for item in items if isinstance(item, FunctionCall)}
    sources: list[str] = []
    for item in items:
        found: tuple[str, ...] = ()
        if isinstance(item, FunctionCallOutput):
            found = (names.get(item.call_id, "a tool"),)
        elif isinstance(item, Message):
            found = item.tainted_by
        sources.extend(s for s in found if s not in sources)
    return sources
