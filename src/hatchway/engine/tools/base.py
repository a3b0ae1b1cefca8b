"""The toolset interface: a source of tools the gateway runs itself."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, Item, ToolSpec
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.payloads import error_body


@dataclass(slots=True)
class Interruption:
    """A tool call that must wait for the end user (a confirmation); the loop pauses on it."""

    message: str
    """What the user is asked, returned as the assistant's message."""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolResult:
    """What one call produced. ``output`` is what the model reads."""

    output: str
    is_error: bool = False
    meta: dict[str, Any] = field(default_factory=dict)
    """Recorded in the run log (``ToolCallStep.of``): server, tool, cached, retries, ``outcome``
    (an ``Outcome``), and whatever else the toolset adds."""
    interrupt: Interruption | None = None

    @classmethod
    def error(cls, code: str, message: str, **meta: Any) -> ToolResult:
        """A structured error the model can read and react to."""
        return cls(
            output=error_body(code, message),
            is_error=True,
            meta={"outcome": Outcome.ERROR, "error_code": code, **meta},
        )


@dataclass(slots=True)
class RunPreamble:
    """What a toolset decided before the first model call of a run."""

    items: list[Item] = field(default_factory=list)
    """Items to append to the conversation first (e.g. an executed operation's call and output)."""
    answer: str | None = None
    """Answer the user with this directly; the model is not called."""
    operation_id: str | None = None
    """The operation ``answer`` is about (its question asked again, or its outcome)."""


class Toolset(ABC):
    """A source of tools executed by the gateway (MCP servers, operations, subagents)."""

    @abstractmethod
    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        """The tools the model may call, with names unique across the run. A source that cannot
        list some of its tools reports it to the run (``ListToolsStep.failed``) and lists the rest."""

    @abstractmethod
    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        """Run one call. Failures are returned as ``ToolResult.error``, not raised."""

    def server_label(self, name: str) -> str | None:
        """The server a call of ``name`` goes to (what its result's ``meta["server"]`` will say),
        known before the call runs; None when the toolset does not say."""
        return None

    async def before_run(self, items: list[Item], ctx: RunContext) -> RunPreamble | None:
        """Look at the conversation before the first model call (operations read a confirmation here)."""
        return None
