"""Claude Code (``@anthropic-ai/claude-code`` from npm, pinned in ``.ci/node-tools.json``) in print
mode against Hatchway's ``/v1/messages``, with nothing but ``ANTHROPIC_BASE_URL`` and the Hatchway
key: it answers a prompt, and runs a shell command the model asks for (its own ``Bash`` tool, a
client tool passed through the gateway) and answers with its output. The model is the scripted
OpenAI-shaped upstream; the command runs for real (docs/clients.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.support.gateway import RunningGateway
from tests.support.node_tools import node_env, package_file
from tests.support.scripted_llm import Reply, ScriptedLLM

MARKER = "claude-code-was-here"


def claude(
    gateway: RunningGateway, tmp_path: Path, prompt: str, *args: str
) -> subprocess.CompletedProcess[str]:
    binary = package_file("@anthropic-ai/claude-code", "bin/claude.exe")
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    env = {
        **node_env(),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": gateway.url,
        "ANTHROPIC_API_KEY": gateway.key,
        "ANTHROPIC_MODEL": "gpt-4o",
        "ANTHROPIC_SMALL_FAST_MODEL": "gpt-4o",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "gpt-4o",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [str(binary), "-p", prompt, "--output-format", "text", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )


def _last(body: dict[str, Any]) -> dict[str, Any]:
    """The last user or tool message (Claude Code puts a system message of its environment after the
    user's prompt)."""
    return next(m for m in reversed(body["messages"]) if m["role"] in ("user", "tool"))


def claude_model(body: dict[str, Any]) -> Reply:
    """Asked to run the command: Claude Code's ``Bash`` tool; its output in: an answer quoting it;
    anything else (a title, a plain prompt): a greeting."""
    last = _last(body)
    if last["role"] == "tool":
        return Reply(text=f"The command said: {last['content'].strip()}")
    text = str(last.get("content"))
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if "run the command" in text and "Bash" in offered:
        return Reply(tool_calls=[("Bash", {"command": f"echo {MARKER}", "description": "Print a marker"})])
    return Reply(text="Hello from Hatchway.")


def test_claude_code_answers_a_prompt(gateway_factory, llm: ScriptedLLM, tmp_path: Path) -> None:
    gateway = gateway_factory()
    llm.handler = claude_model
    done = claude(gateway, tmp_path, "Say hello.")
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "Hello from Hatchway." in done.stdout
    assert llm.requests and all(gateway.key not in str(h) for h in llm.headers)  # the key stops here


def test_claude_code_runs_a_tool_the_model_asks_for(
    gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    gateway = gateway_factory()
    llm.handler = claude_model
    done = claude(gateway, tmp_path, "Please run the command.", "--allowedTools", "Bash(echo:*)")
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert f"The command said: {MARKER}" in done.stdout
    outputs = [m["content"] for body in llm.requests for m in body["messages"] if m["role"] == "tool"]
    assert any(MARKER in out for out in outputs)  # the command ran, and its output went back through Hatchway
