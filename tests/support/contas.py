"""The example ``contas`` MCP server (examples/contas_server.py) on a loopback port, for tests,
the ``contas`` agent's files pointing at it, and a scripted model that drives the agent."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from examples.contas_server import ContasBackend, create_app

from tests.support.mcp_caller import ClientCaller
from tests.support.paths import EXAMPLE_AGENT
from tests.support.scripted_llm import Reply
from tests.support.servers import ServerThread

ABC = {"subject": "Produto A, Produto B e Produto C"}
"""The cancellation the tests ask for; the example server fails Produto B (``not_found``)."""
ASK = "cancele Produto A, Produto B e Produto C"
"""The user's request for it, as ``contas_model`` reads it."""
QUESTION = "Você confirma o cancelamento de Produto A, Produto B e Produto C?"
"""What the agent asks before executing."""
ANSWER = "PARTIAL_SUCCESS — Produto A: cancelado; Produto B: falhou (not_found); Produto C: cancelado."
"""What ``contas_model`` answers once it has executed."""


class RunningContas:
    """The server under uvicorn; ``backend`` counts executions per idempotency key."""

    def __init__(self) -> None:
        self.backend = ContasBackend()
        self.server = ServerThread(create_app(self.backend))

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"

    def caller(self, **servers: str) -> ClientCaller:
        """A caller that reaches this server as ``contas`` (plus any other ids given)."""
        return ClientCaller({"contas": self.url, **servers})

    def agent(
        self,
        directory: Path,
        *,
        name: str = "contas",
        policies: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The example agent as an ``agents:`` entry, its plugin pointing at this server.

        ``policies`` replaces tool policies by tool name; ``server`` overrides plugin server keys
        (``url``, ``timeout_ms``…).
        """
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(EXAMPLE_AGENT / "tools.yaml", directory / "tools.yaml")
        plugin = yaml.safe_load((EXAMPLE_AGENT / "plugin.yaml").read_text())
        plugin["mcp_servers"][0].update({"url": self.url, "max_retries": 0, **(server or {})})
        (directory / "plugin.yaml").write_text(yaml.safe_dump(plugin))
        rules = yaml.safe_load((EXAMPLE_AGENT / "tool_policies.yaml").read_text())
        rules["tool_policies"].update(policies or {})
        (directory / "tool_policies.yaml").write_text(yaml.safe_dump(rules))
        return {
            "name": name,
            "model": "gpt-4o",
            "instructions": "Você atende clientes de telecom.",
            "plugin": str(directory / "plugin.yaml"),
            "tools": str(directory / "tools.yaml"),
            "tool_policies": str(directory / "tool_policies.yaml"),
        }

    def start(self) -> RunningContas:
        self.server.start()
        return self

    def stop(self) -> None:
        if self.backend.gate is not None:
            self.backend.gate.set()  # never leave a held execution behind
        self.server.stop()


_CANCEL = re.compile(r"\bcancel(?:e|ar)\s+(?:o |os |a |as )?(.+)", re.IGNORECASE)


def contas_model(body: dict[str, Any]) -> Reply:
    """A scripted model for the ``contas`` agent (a ``ScriptedLLM.handler``).

    "cancele X, Y e Z" → one call of ``cancelar_vas_avulso(subject="X, Y e Z")``; after a tool
    output, an answer built only from the per-item summary Hatchway gave it — unless the user's
    "não, cancele X" cancelled the pending one, then X is asked for; anything else → a plain answer.
    """
    messages = body["messages"]
    last = messages[-1]
    user = next((m for m in reversed(messages) if m["role"] == "user"), {})
    match = _CANCEL.search(user.get("content") if isinstance(user.get("content"), str) else "")
    if last["role"] == "tool":
        summary = json.loads(last["content"])
        if not (match and summary.get("reason") == "cancelled by the user's reply"):
            return Reply(text=report(summary))
    elif last["role"] != "user" or not match:
        return Reply(text="Posso ajudar em algo mais?")
    return Reply(tool_calls=[("cancelar_vas_avulso", {"subject": match.group(1).strip(" .!")})])


def report(summary: dict[str, Any]) -> str:
    """What the model tells the user from an operation's output (or a structured error)."""
    if "error" in summary and "status" not in summary:
        return f"Não executado: {summary['error']['message']}"
    items = summary.get("items")
    if items:
        parts = [
            f"{i['name']}: cancelado" if i.get("success") else f"{i['name']}: falhou ({i.get('error')})"
            for i in items
        ]
        return f"{summary.get('verdict')} — " + "; ".join(parts) + "."
    return f"{summary['status']}: {summary.get('reason') or 'nada foi executado'}"
