"""Claude Code (``@anthropic-ai/claude-code`` from npm, pinned in ``.ci/node-tools.json``) in print
mode against Hatchway's ``/v1/messages``, with nothing but ``ANTHROPIC_BASE_URL`` and the Hatchway
key: it answers a prompt, and runs a shell command the model asks for (its own ``Bash`` tool, a
client tool passed through the gateway) and answers with its output. The model is the scripted
OpenAI-shaped upstream; the command runs for real (docs/clients.md). Its ``Read`` of a PNG reaches
an OpenAI-shaped and a native Anthropic upstream as an image (issue 41)."""

from __future__ import annotations

import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import RunningGateway
from tests.support.node_tools import node_env, package_file
from tests.support.scripted_llm import Reply, ScriptedLLM

MARKER = "claude-code-was-here"


def claude(
    gateway: RunningGateway, tmp_path: Path, prompt: str, *args: str, model: str = "gpt-4o"
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
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
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


def _png(width: int = 4, height: int = 4) -> bytes:
    """A real PNG (red pixels), written out by hand: no imaging library is needed for four pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    image = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + image


SAW = "I see an image/png."


def _images(body: dict[str, Any]) -> list[str]:
    """The media types of the images the upstream was sent, in either shape (an OpenAI ``image_url``
    part of a user message; an Anthropic ``image`` block, inside a ``tool_result`` or not)."""
    found: list[str] = []

    def walk(blocks: Any) -> None:
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image_url":
                found.append(block["image_url"]["url"].partition(";")[0].removeprefix("data:"))
            elif block.get("type") == "image":
                found.append(block["source"].get("media_type", ""))
            walk(block.get("content"))

    for message in body.get("messages", []):
        walk(message.get("content"))
    return found


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_claude_codes_read_of_a_png_reaches_the_upstream_as_an_image(
    gateway_factory, llm: ScriptedLLM, tmp_path: Path, kind: str
) -> None:
    upstream_model = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5"}[kind]
    provider = {"id": "up", "type": kind, "base_url": f"{llm.server.url}/v1", "api_key": "k"}
    gateway = gateway_factory(
        providers=[provider], models=[{"name": "claude", "provider": "up", "upstream_model": upstream_model}]
    )
    (tmp_path / "work").mkdir()
    shot = tmp_path / "work" / "shot.png"
    shot.write_bytes(_png())

    def model(body: dict[str, Any]) -> Reply:
        if "image/png" in _images(body):
            return Reply(text=SAW)
        offered = {t.get("name") or t.get("function", {}).get("name") for t in body.get("tools") or []}
        if "shot.png" in str(body.get("messages")) and "Read" in offered:
            return Reply(tool_calls=[("Read", {"file_path": str(shot)})])
        return Reply(text="Nothing to read.")

    llm.handler = model
    done = claude(gateway, tmp_path, "Look at shot.png.", "--allowedTools", "Read", model="claude")

    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert SAW in done.stdout, done.stdout[-2000:]
    first = next(body for body in llm.requests if _images(body))
    assert _images(first) == ["image/png"]  # one image: the file Claude Code read, not text in its place
