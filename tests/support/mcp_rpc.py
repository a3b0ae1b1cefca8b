"""One raw MCP 2026-07-28 stateless request to an endpoint, as any HTTP client sends it: what the
endpoint tests use to send exactly the bytes they mean (odd headers, forged state, tasks)."""

from __future__ import annotations

import json
from typing import Any

import httpx

MODERN = "2026-07-28"


def rpc(
    url: str,
    key: str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    user: str | None = None,
    capabilities: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    name: str | None = None,
    timeout: float = 20,
) -> tuple[httpx.Response, dict[str, Any] | None, str]:
    """One raw 2026-07-28 stateless request: the HTTP response, its JSON-RPC answer, the whole body."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "attacker", "version": "1"},
    }
    sent = {
        "authorization": f"Bearer {key}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if name is not None:
        sent["mcp-name"] = name
    if user is not None:
        sent["x-on-behalf-of"] = user
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {}), "_meta": meta}}
    response = httpx.post(url, json=body, headers={**sent, **(headers or {})}, timeout=timeout)
    text = response.text
    answer = None
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in text.splitlines():
            if line.startswith("data:") and '"id"' in line:
                answer = json.loads(line[5:])
    elif response.headers.get("content-type", "").startswith("application/json"):
        parsed = response.json()
        answer = parsed if isinstance(parsed, dict) else None
    return response, answer, text


def call(url: str, key: str, tool: str, arguments: dict[str, Any], **kwargs: Any) -> Any:
    return rpc(url, key, "tools/call", {"name": tool, "arguments": arguments}, name=tool, **kwargs)
