"""Turn an MCP ``CallToolResult`` into what a model (or an operation) reads."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson

from hatchway.engine.tools.mcp.calls import McpCallResult


def to_call_result(result: types.CallToolResult) -> McpCallResult:
    """Text blocks joined; other blocks described; structured content kept (or parsed from the text)."""
    text = "\n".join(_block_text(block) for block in result.content)
    structured: Any = result.structured_content
    if structured is None and text:
        try:
            structured = orjson.loads(text)
        except orjson.JSONDecodeError:
            structured = None
    if not text and result.structured_content is not None:
        text = orjson.dumps(result.structured_content).decode()
    return McpCallResult(
        text=text, structured=structured, is_error=bool(result.is_error), content=list(result.content)
    )


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        contents = block.resource
        if isinstance(contents, types.TextResourceContents):
            return contents.text
        return f"[binary resource {contents.uri} ({contents.mime_type or 'unknown type'})]"
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} ({block.mime_type}), {len(block.data)} base64 characters, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}]"
    return f"[{getattr(block, 'type', 'unknown')} content]"
