"""The Node clients, pinned in ``.ci/node-tools.json``: the ``openai`` package (Chat Completions and
Responses) and the Vercel AI SDK (``openai.chat()``, ``openai.responses()`` with ``store`` true and
false, ``@ai-sdk/openai-compatible``), each driven by ``tests/interop/drivers/node_clients.cjs`` against
Hatchway with a base URL and a key: plain and streamed answers, a client tool round trip, a second
turn (the Vercel Responses provider replays stored output as ``item_reference`` items), an
``agent:`` model running the MCP loop, the confirmation flow of an agent with ``tool_policies.yaml``,
and the upstream's 429 and a wrong key as each client's own error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.node_tools import node_env, package_file, tools_dir
from tests.support.scripted_llm import ScriptedLLM

SCRIPT = Path(__file__).parent / "drivers" / "node_clients.cjs"
CLIENTS = [
    "openai-chat",
    "openai-responses",
    "vercel-chat",
    "vercel-responses",
    "vercel-responses-unstored",
    "vercel-compatible",
]
ERRORS = {  # what each client throws: its own error class, with the HTTP status
    "openai-chat": ("RateLimitError", "AuthenticationError"),
    "openai-responses": ("RateLimitError", "AuthenticationError"),
}


def drive(
    gateway, client: str, scenario: str, *, model: str = "gpt-4o", key: str | None = None, **env: str
) -> dict[str, Any]:
    package_file("ai", "package.json")  # skips (or fails in CI) without the Node tools
    environment = {
        **node_env(),
        "NODE_PATH": str(tools_dir() / "node_modules"),
        "GATEWAY_URL": gateway.url,
        "API_KEY": key or gateway.key,
        "MODEL": model,
        **env,
    }
    done = subprocess.run(
        ["node", str(SCRIPT), client, scenario], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("client", CLIENTS)
def test_plain_streamed_a_tool_round_trip_and_a_second_turn(gateway, llm: ScriptedLLM, client: str) -> None:
    llm.handler = conversation_model

    assert drive(gateway, client, "plain") == {"ok": True, "text": "Turn 1."}
    assert drive(gateway, client, "stream") == {"ok": True, "text": "Turn 1."}
    assert drive(gateway, client, "turns") == {"ok": True, "text": "Turn 1. Turn 2."}
    tool = drive(gateway, client, "tool")
    assert tool["ok"] and tool["text"] == "It is sunny.", tool
    assert tool["called"] in ("get_weather", "Faro")


@pytest.mark.parametrize("client", CLIENTS)
def test_an_agent_model_runs_the_mcp_loop(calc_gateway: CalcGateway, client: str) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server

    for scenario in ("plain", "stream"):
        answer = drive(gateway, client, scenario, model="agent:calc")
        assert answer["ok"] and answer["text"].startswith("The sum is") and "5" in answer["text"], answer
    assert server.tool_calls("add") == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_the_confirmation_flow_of_an_agent_with_tool_policies(
    agent_gateway, contas: RunningContas, client: str
) -> None:
    headers = json.dumps({"X-On-Behalf-Of": "ana", "hatchway-session": f"node-{client}"})

    answer = drive(
        agent_gateway, client, "confirm", model="agent:contas", FIRST=ASK, SECOND="sim", EXTRA_HEADERS=headers
    )

    assert answer == {"ok": True, "texts": [QUESTION, ANSWER]}, answer
    assert list(contas.backend.executions.values()) == [1]


@pytest.mark.parametrize("client", CLIENTS)
def test_an_upstream_429_and_a_wrong_key_are_the_clients_own_errors(
    gateway, llm: ScriptedLLM, client: str
) -> None:
    llm.reply(status=429, error="slow down")
    limited = drive(gateway, client, "stream")["error"]
    refused = drive(gateway, client, "error", key="hw-wrong")["error"]

    assert (limited["status"], refused["status"]) == (429, 401), (limited, refused)
    expected = ERRORS.get(client, ("APICallError", "APICallError"))
    assert (limited["name"], refused["name"]) == expected
