"""Example MCP server for research agents: ``search_web`` and ``fetch_page`` over a small offline corpus.

Built with the official ``mcp`` SDK, like the seed's ``pesquisa_web`` server, but deterministic and
offline: the "web" is three pages summarising the Model Context Protocol specification, so the
demo (``make demo``) and the README's guide give the same answers on any machine.

- ``search_web(query)`` — the corpus pages ranked by how many of the query's words they contain
  (title, URL and snippet of each);
- ``fetch_page(url)`` — the text of one page of the corpus (an unknown URL is a tool error).

Run it: ``python -m examples.research_server --port 8766`` (streamable HTTP at ``/mcp``), or import
``create_app()`` as an ASGI app.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any

from mcp.server import MCPServer
from starlette.applications import Starlette


@dataclass(frozen=True)
class Page:
    """One page of the offline corpus."""

    url: str
    title: str
    text: str

    @property
    def snippet(self) -> str:
        return self.text.split(". ")[0] + "."


CORPUS = (
    Page(
        url="https://modelcontextprotocol.io/specification/2025-06-18/basic/transports",
        title="Transports - Model Context Protocol",
        text=(
            "MCP defines two standard transports for client-server communication: stdio, where the "
            "client launches the server as a subprocess and they exchange JSON-RPC messages over "
            "standard input and output, and Streamable HTTP, where the server is an independent process "
            "reached with HTTP POST and GET, optionally streaming responses as Server-Sent Events. "
            "Streamable HTTP replaces the HTTP+SSE transport of protocol version 2024-11-05. "
            "Clients should support stdio whenever possible. "
            "A server may assign a session id at initialization in the Mcp-Session-Id header."
        ),
    ),
    Page(
        url="https://modelcontextprotocol.io/specification/2025-06-18/basic/authorization",
        title="Authorization - Model Context Protocol",
        text=(
            "Authorization is optional in MCP and applies to HTTP-based transports; a stdio server "
            "should take its credentials from the environment instead. "
            "An MCP server acts as an OAuth 2.1 resource server and tells clients where its "
            "authorization server is through Protected Resource Metadata (RFC 9728). "
            "Clients send the access token in the Authorization header as a Bearer token on every "
            "HTTP request, and servers answer 401 when it is missing or invalid."
        ),
    ),
    Page(
        url="https://modelcontextprotocol.io/specification/2025-06-18/server/tools",
        title="Tools - Model Context Protocol",
        text=(
            "Tools let a server expose actions that a language model can invoke; they are "
            "model-controlled, and a human should be able to deny an invocation. "
            "Clients discover tools with tools/list, each described by a name, a description and a "
            "JSON Schema for its input, and invoke one with tools/call. "
            "A tool reports failures inside its result with isError set to true, so the model can "
            "see the error and react to it."
        ),
    ),
)

_WORD = re.compile(r"[a-z0-9+]{3,}")
_COMMON = frozenset("the and for with what which does how are from that this its into about".split())


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _COMMON


def search(query: str, limit: int = 3) -> list[dict[str, Any]]:
    """The corpus ranked for ``query``: words shared with the title count triple, corpus order on ties."""
    wanted = _words(query)
    scored = [
        (3 * len(wanted & _words(page.title)) + len(wanted & _words(page.text)), -i, page)
        for i, page in enumerate(CORPUS)
    ]
    ranked = [page for score, _, page in sorted(scored, reverse=True) if score > 0]
    return [{"title": p.title, "url": p.url, "snippet": p.snippet} for p in ranked[:limit]]


def fetch(url: str) -> dict[str, Any]:
    """A corpus page by URL; ValueError (a tool error for the model) when it is not in the corpus."""
    page = next((p for p in CORPUS if p.url == url.strip()), None)
    if page is None:
        raise ValueError(f"{url} is not in the offline corpus; use a URL returned by search_web")
    return {"url": page.url, "title": page.title, "text": page.text}


def build_server() -> MCPServer:
    """The MCP server with its two tools."""
    mcp = MCPServer(
        "research",
        instructions="An offline research corpus (three pages about MCP), deterministic.",
        log_level="WARNING",
    )

    @mcp.tool()
    def search_web(query: str) -> dict[str, Any]:
        """Search the web (an offline corpus): title, URL and snippet of the best pages."""
        return {"query": query, "results": search(query)}

    @mcp.tool()
    def fetch_page(url: str) -> dict[str, Any]:
        """Fetch one page returned by search_web and return its text."""
        return fetch(url)

    return mcp


def create_app() -> Starlette:
    """The server as an ASGI app (streamable HTTP at ``/mcp``)."""
    return build_server().streamable_http_app()


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Example research MCP server (offline corpus).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
