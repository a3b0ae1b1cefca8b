"""A stdio MCP server for tests (run as a script by the gateway's stdio transport)."""

from __future__ import annotations

import os

from mcp.server import MCPServer

server = MCPServer("stdio-test", log_level="WARNING")


@server.tool(description="Echo the text back.")
async def echo(text: str) -> str:
    return f"stdio-echo:{text}"


@server.tool(description="The process id of this server (one process per session).")
async def pid() -> int:
    return os.getpid()


if __name__ == "__main__":
    server.run("stdio")
