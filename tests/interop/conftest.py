"""What the client tests share: a gateway whose ``agent:calc`` runs the MCP loop over an SDK-built
server's ``add`` tool (the scripted model asks for ``calc__add(2, 3)`` and reports the result), and
the scripted model of a plain conversation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_loop import write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM


@dataclass
class CalcGateway:
    gateway: RunningGateway
    server: McpTestServer


def adder(body: dict[str, Any]) -> Reply:
    """Ask for ``calc__add(2, 3)``; once its result is in, answer "The sum is <result>"."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"The sum is {last['content']}")
    return Reply(tool_calls=[("calc__add", {"a": 2, "b": 3})])


def is_the_sum(text: str) -> bool:
    return text.startswith("The sum is") and "5" in text


@pytest.fixture
def calc_gateway(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> CalcGateway:
    server = mcp_server_factory("calc")
    plugin = write_plugin(
        tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": server.url, "tools": ["add"]}]}
    )
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "calc", "model": "gpt-4o", "instructions": "Add.", "plugin": plugin}],
    )
    llm.handler = adder
    return CalcGateway(gateway, server)


def conversation_model(body: dict[str, Any]) -> Reply:
    """A plain conversation: "Turn <n>." for the n-th user message; asked about the weather, a call
    of the client's ``get_weather(city="Faro")``, then "It is <its result>."; "rate-limit me" → 429."""
    last = body["messages"][-1]
    if last.get("content") == "rate-limit me":
        return Reply(status=429, error="slow down")
    if last["role"] == "tool":
        return Reply(text=f"It is {str(last['content']).strip(chr(34))}.")
    if "weather" in str(last.get("content")):
        return Reply(tool_calls=[("get_weather", {"city": "Faro"})])
    if body.get("response_format"):
        return Reply(text='{"city": "Faro", "sunny": true}')
    return Reply(text=f"Turn {sum(1 for m in body['messages'] if m['role'] == 'user')}.")
