"""LiteLLM's SDK (``litellm``, pinned in ``.ci/litellm-requirements.txt``, in its own virtualenv)
against Hatchway as an ``openai/…`` model with ``api_base``: ``litellm.completion`` and
``litellm.responses``, plain and streamed, a client tool round trip, a second turn, an ``agent:``
model running the MCP loop, the confirmation flow of an agent with ``tool_policies.yaml``, and the
upstream's 429 and a wrong key as LiteLLM's own ``RateLimitError`` and ``AuthenticationError``.
One driver process per gateway: importing LiteLLM takes seconds."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import CalcGateway, conversation_model
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.paths import ROOT
from tests.support.scripted_llm import ScriptedLLM

VENV_PYTHON = ROOT / ".ci" / "litellm-venv" / "bin" / "python"
DRIVER = Path(__file__).parent / "drivers" / "litellm_driver.py"
CLIENTS = ("chat", "responses")
INSTALL = "python3 -m venv .ci/litellm-venv; .ci/litellm-venv/bin/pip install -r .ci/litellm-requirements.txt"


def drive(gateway, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``tasks`` in one LiteLLM process against ``gateway`` (its key unless a task names one)."""
    if not VENV_PYTHON.exists():
        reason = f"LiteLLM's virtualenv is missing; make it with: {INSTALL}"
        if os.environ.get("HATCHWAY_REQUIRE_NODE_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    environment = {**os.environ, "GATEWAY_URL": gateway.url, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [str(VENV_PYTHON), str(DRIVER)],
        input=json.dumps([{"key": gateway.key, **task} for task in tasks]),
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_both_apis_answer_stream_call_tools_continue_and_fail_as_litellm_errors(
    gateway, llm: ScriptedLLM
) -> None:
    llm.handler = conversation_model
    tasks = [
        {"client": client, "scenario": scenario}
        for client in CLIENTS
        for scenario in ("plain", "stream", "turns", "tool")
    ]
    tasks += [{"client": c, "scenario": "stream", "first": "rate-limit me"} for c in CLIENTS]
    tasks += [{"client": c, "scenario": "plain", "key": "hw-wrong"} for c in CLIENTS]

    results = iter(drive(gateway, tasks))

    for _ in CLIENTS:
        assert next(results) == {"ok": True, "text": "Turn 1."}
        assert next(results) == {"ok": True, "text": "Turn 1."}
        assert next(results) == {"ok": True, "texts": ["Turn 1.", "Turn 2."]}
        assert next(results) == {"ok": True, "text": "It is sunny.", "called": "get_weather"}
    for expected in (
        ("RateLimitError", 429),
        ("RateLimitError", 429),
        ("AuthenticationError", 401),
        ("AuthenticationError", 401),
    ):
        error = next(results)["error"]
        assert (error["name"], error["status"]) == expected, error


def test_an_agent_model_runs_the_mcp_loop(calc_gateway: CalcGateway) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server
    tasks = [
        {"client": c, "scenario": s, "model": "agent:calc"} for c in CLIENTS for s in ("plain", "stream")
    ]

    results = drive(gateway, tasks)

    for answer in results:
        assert answer["ok"] and answer["text"].startswith("The sum is") and "5" in answer["text"], answer
    assert server.tool_calls("add") == 4


def test_the_confirmation_flow_of_an_agent_with_tool_policies(agent_gateway, contas: RunningContas) -> None:
    tasks = [
        {
            "client": client,
            "scenario": "confirm",
            "model": "agent:contas",
            "first": ASK,
            "second": "sim",
            "headers": {"X-On-Behalf-Of": "ana", "hatchway-session": f"litellm-{client}"},
        }
        for client in CLIENTS
    ]

    results = drive(agent_gateway, tasks)

    assert results == [{"ok": True, "texts": [QUESTION, ANSWER]}] * 2, results
    assert sorted(contas.backend.executions.values()) == [1, 1]
