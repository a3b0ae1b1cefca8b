"""Helpers for end-to-end agent-loop tests: plugin files and headers, scripted rounds, run logs."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply

USER = [{"role": "user", "content": "go"}]


def write_plugin(tmp_path: Path, name: str, plugin: dict[str, Any]) -> str:
    """Write ``plugins/<name>.yaml`` (version 1) under ``tmp_path``; the path relative to it."""
    (tmp_path / "plugins").mkdir(exist_ok=True)
    (tmp_path / "plugins" / f"{name}.yaml").write_text(yaml.safe_dump({"version": "1", **plugin}))
    return f"plugins/{name}.yaml"


def rule_for(tmp_path: Path, plugin: dict[str, Any], model: str = "gpt-4o") -> dict[str, Any]:
    """hatchway.yaml overrides binding ``plugin`` to ``model`` with a routing rule."""
    return {
        "routing_rules": [
            {
                "name": "research",
                "match": {"model": model},
                "plugin": write_plugin(tmp_path, "research", plugin),
            }
        ]
    }


def inline(plugin: dict[str, Any]) -> str:
    """The value of a ``hatchway-mcp-plugin`` header carrying ``plugin``."""
    return base64.b64encode(yaml.safe_dump({"version": "1", **plugin}).encode()).decode()


def tool_messages(body: dict[str, Any]) -> list[str]:
    """The tool results a model call received."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def rounds(*replies: Callable[[dict[str, Any]], Reply] | Reply) -> Callable[[dict[str, Any]], Reply]:
    """A handler answering the n-th model call of a conversation with the n-th reply."""

    def handler(body: dict[str, Any]) -> Reply:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        reply = replies[min(n, len(replies) - 1)]
        return reply(body) if callable(reply) else reply

    return handler


def summarise(body: dict[str, Any]) -> Reply:
    """A final answer quoting every tool result."""
    return Reply(text="Answer from: " + " | ".join(tool_messages(body)))


def log_of(gateway: RunningGateway, log_id: str, key: str | None = None) -> dict[str, Any]:
    """The stored run record ``GET /v1/logs/{id}`` (as the gateway's org, or ``key``'s)."""
    response = httpx.get(
        f"{gateway.url}/v1/logs/{log_id}", headers={"authorization": f"Bearer {key or gateway.key}"}
    )
    assert response.status_code == 200, response.text
    return response.json()


def tool_steps(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in record["steps"] if s["type"] == "tool_call"]
