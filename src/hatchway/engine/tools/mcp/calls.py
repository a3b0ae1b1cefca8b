"""The seam other tool layers use to call one MCP tool through the run's plugin.

The plugin binding gives each run an object satisfying ``McpToolCaller`` for the plugin bound to it
(``PluginPart.client``); operations (tools.yaml / tool_policies.yaml)
call validators and primary tools through it, with the same pool, auth, headers, timeouts and
retries as the loop's own MCP calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hatchway.engine.context import RunContext


@dataclass(slots=True)
class McpCallResult:
    text: str
    """The text content blocks joined (what a model would read)."""
    structured: Any | None
    """``structuredContent`` when the server sent it; otherwise the text parsed as JSON when it parses."""
    is_error: bool
    """The tool's own ``isError`` flag (a tool-level failure, not a transport one)."""
    content: list[Any] = field(default_factory=list, repr=False)
    """The result's content blocks as the server sent them (SDK models), for an MCP endpoint that
    relays them whole (images, audio, resources); the model reads ``text``."""


class McpToolCaller(Protocol):
    def has_server(self, server_id: str) -> bool:
        """Whether the bound plugin declares this server id."""

    async def call_mcp_tool(
        self,
        server_id: str,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        *,
        meta: dict[str, Any] | None = None,
        at_most_once: bool = False,
    ) -> McpCallResult:
        """Call ``tool`` on the plugin's server ``server_id``; ``meta`` goes in the request's ``_meta``.

        Raises ToolError (McpServerError / ToolTimeout) when the server cannot be reached or answers
        with a protocol error after the server's retries; a tool's own error result is returned with
        ``is_error=True`` and is never retried. A failure after the request may have reached the
        server is retried only for an idempotent tool, otherwise it raises ToolOutcomeUnknown;
        ``at_most_once`` (an operation's execution) raises it even for an idempotent tool.
        """
