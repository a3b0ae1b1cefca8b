"""A fixed-latency MCP server for benchmarks, built with the official SDK (streamable HTTP).

    python -m bench.mcp_tool_server --port 9102 --latency-ms 20

One tool, ``lookup(q)``, that waits ``--latency-ms`` and answers.
"""

from __future__ import annotations

import argparse
import asyncio


def main() -> None:
    import uvicorn
    from mcp.server import MCPServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    server = MCPServer("bench", log_level="WARNING")

    @server.tool(description="Look something up (fixed latency).")
    async def lookup(q: str) -> str:
        await asyncio.sleep(args.latency_ms / 1000)
        return f"result for {q}"

    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
