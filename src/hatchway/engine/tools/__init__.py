"""One router for every tool call: client tools, MCP tools, operations, subagents."""

from hatchway.engine.tools.base import Interruption, RunPreamble, ToolResult, Toolset
from hatchway.engine.tools.router import ToolRouter

__all__ = ["Interruption", "RunPreamble", "ToolResult", "ToolRouter", "Toolset"]
