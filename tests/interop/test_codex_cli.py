"""Codex CLI (``@openai/codex`` from npm, pinned in ``.ci/node-tools.json``) against Hatchway with
nothing but a custom model provider (``wire_api = "responses"``) in its ``config.toml``: ``codex
exec`` runs a shell command the model asks for and answers (Codex always streams), an ``agent:``
model runs the MCP loop in the gateway, ``codex exec resume --last`` continues the session, an
agent with ``tool_policies.yaml`` asks and a resumed "sim" confirms, and an upstream 429 and a wrong
key end Codex with their status.

Codex's requests are its own (namespaced tools, a hosted ``web_search`` tool, ``client_metadata``,
``include``, ``store: false``): no shim, no flag beyond the provider config. The model is the
scripted upstream; the command runs for real, in Codex's read-only sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.interop.conftest import CalcGateway
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas
from tests.support.node_tools import node_env, package_file
from tests.support.scripted_llm import Reply, ScriptedLLM

SHELL_TOOLS = ("exec_command", "shell_command", "shell")


def codex(
    gateway,
    tmp_path: Path,
    *args: str,
    model: str = "gpt-4o",
    key: str | None = None,
    provider: str = "",
) -> subprocess.CompletedProcess[str]:
    """``codex exec …`` in ``tmp_path/work``, its home (config, sessions) in ``tmp_path/codex``;
    ``provider``: more lines of the provider block (``http_headers``, retries)."""
    script = package_file("@openai/codex", "bin/codex.js")
    home, work = tmp_path / "codex", tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("hello\n")
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "hatchway"\n\n'
        "[model_providers.hatchway]\n"
        'name = "Hatchway"\n'
        f'base_url = "{gateway.url}/v1"\n'
        'env_key = "HATCHWAY_API_KEY"\n'
        'wire_api = "responses"\n' + provider
    )
    env = {**node_env(), "CODEX_HOME": str(home), "HATCHWAY_API_KEY": key or gateway.key, "NO_COLOR": "1"}
    return subprocess.run(
        [str(script), "exec", "--skip-git-repo-check", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def shell_call(body: dict[str, Any]) -> Reply:
    """Codex's shell tool, whichever of its names this Codex offers, asked to list the directory."""
    name = next(n for n in tool_names(body) if n in SHELL_TOOLS)
    arguments = {"cmd": "ls"} if name == "exec_command" else {"command": ["ls"] if name == "shell" else "ls"}
    return Reply(tool_calls=[(name, arguments)])


def codex_model(body: dict[str, Any]) -> Reply:
    """List the directory when asked; once the command's output is in, answer with what it showed."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return Reply(text=f"Listed: {'notes.txt' in messages[-1]['content']}")
    if messages[-1]["role"] == "user" and "list" in str(messages[-1]["content"]):
        return shell_call(body)
    return Reply(text=f"Turns so far: {sum(1 for m in messages if m['role'] == 'user')}")


def test_codex_runs_a_shell_command_the_model_asks_for_and_answers(
    gateway, llm: ScriptedLLM, tmp_path: Path
) -> None:
    llm.handler = codex_model

    done = codex(gateway, tmp_path, "list the files here")

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "Listed: True" in done.stdout  # the command ran and its output went back to the model
    first = llm.requests[0]
    assert any(n in SHELL_TOOLS for n in tool_names(first))
    assert "web_search" not in tool_names(first)  # Codex's hosted tool was accepted, not offered
    assert any("__" in n for n in tool_names(first))  # its namespaced tools, flattened for the model


def test_codex_exec_resume_last_continues_the_session(gateway, llm: ScriptedLLM, tmp_path: Path) -> None:
    llm.handler = codex_model
    assert codex(gateway, tmp_path, "list the files here").returncode == 0

    resumed = codex(gateway, tmp_path, "resume", "--last", "and what now?")

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = llm.requests[-1]["messages"]
    said = [str(m.get("content")) for m in last if m["role"] == "user"]
    assert any("list the files here" in s for s in said) and "and what now?" in said[-1]
    assert "Turns so far:" in resumed.stdout


def test_an_agent_model_runs_the_mcp_loop_in_the_gateway(calc_gateway: CalcGateway, tmp_path: Path) -> None:
    gateway, server = calc_gateway.gateway, calc_gateway.server

    done = codex(gateway, tmp_path, "add 2 and 3", model="agent:calc")

    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert server.tool_calls("add") == 1  # run by the gateway, not by Codex
    assert "The sum is" in done.stdout and "5" in done.stdout.split("The sum is", 1)[1]


def test_the_confirmation_flow_of_an_agent_with_tool_policies(
    agent_gateway, contas: RunningContas, tmp_path: Path
) -> None:
    """``agent:contas`` asks before it cancels anything; ``codex exec resume --last "sim"`` confirms.
    The end user and the session come from the provider block's ``http_headers``."""
    headers = 'http_headers = { "X-On-Behalf-Of" = "ana", "hatchway-session" = "codex-1" }\n'

    asked = codex(agent_gateway, tmp_path, ASK, model="agent:contas", provider=headers)
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert QUESTION in asked.stdout and contas.backend.stats()["total_executions"] == 0

    confirmed = codex(
        agent_gateway, tmp_path, "resume", "--last", "sim", model="agent:contas", provider=headers
    )
    assert confirmed.returncode == 0, confirmed.stderr[-3000:]
    assert ANSWER in confirmed.stdout
    assert list(contas.backend.executions.values()) == [1]


NO_RETRIES = "request_max_retries = 0\nstream_max_retries = 0\n"


def test_an_upstream_429_and_a_wrong_key_end_codex_with_the_status(
    gateway, llm: ScriptedLLM, tmp_path: Path
) -> None:
    llm.handler = lambda _: Reply(status=429, error="slow down")
    limited = codex(gateway, tmp_path, "hello", provider=NO_RETRIES)
    assert limited.returncode != 0
    assert (
        "429" in limited.stdout + limited.stderr or "rate limit" in (limited.stdout + limited.stderr).lower()
    )

    refused = codex(gateway, tmp_path, "hello", key="hw-wrong", provider=NO_RETRIES)
    assert refused.returncode != 0 and "401" in refused.stdout + refused.stderr
