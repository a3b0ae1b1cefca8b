"""A minimal ``McpToolCaller`` on the official ``mcp.Client``, for operations tests.

It stands in for the MCP client pool (built on another branch, outside the operations core's
scope): one real streamable-HTTP connection per call to the servers given by id, the same
``McpCallResult`` contract, ``_meta`` passed through, connection failures as McpServerError.
No pooling, auth, retries or timeouts beyond ``timeout`` — those belong to the pool.
"""

from __future__ import annotations

from typing import Any

import orjson
from mcp import Client

from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpCallResult
from hatchway.errors import McpServerError, ToolTimeout


class ClientCaller:
    """``servers``: server id → streamable HTTP URL (``http://127.0.0.1:P/mcp``)."""

    def __init__(self, servers: dict[str, str], *, timeout: float = 20.0) -> None:
        self.servers = dict(servers)
        self.timeout = timeout
        self.calls: list[dict[str, Any]] = []

    def has_server(self, server_id: str) -> bool:
        return server_id in self.servers

    async def call_mcp_tool(
        self,
        server_id: str,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        *,
        meta: dict[str, Any] | None = None,
        at_most_once: bool = False,  # this caller never retries anyway
    ) -> McpCallResult:
        self.calls.append({"server": server_id, "tool": tool, "arguments": arguments, "meta": meta})
        url = self.servers.get(server_id)
        if url is None:
            raise McpServerError(f"unknown MCP server {server_id!r}")
        try:
            async with Client(url, read_timeout_seconds=self.timeout, cache=None) as client:
                result = await client.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]
        except TimeoutError as exc:
            raise ToolTimeout(f"{server_id}.{tool}: no answer in {self.timeout}s") from exc
        except Exception as exc:  # connection refused, protocol error: the pool's McpServerError
            raise McpServerError(f"{server_id}.{tool}: {type(exc).__name__}", transient=True) from exc
        text = "".join(getattr(block, "text", "") for block in result.content)
        structured = result.structured_content
        if structured is None and text:
            try:
                structured = orjson.loads(text)
            except orjson.JSONDecodeError:
                structured = None
        return McpCallResult(text=text, structured=structured, is_error=bool(result.is_error))
