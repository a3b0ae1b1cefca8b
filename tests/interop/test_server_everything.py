"""The gateway against a third-party MCP server: ``@modelcontextprotocol/server-everything`` (npm).

Over stdio, streamable HTTP and the legacy SSE transport: the gateway lists its tools and runs a
loop that calls ``echo`` and ``get-sum`` (the scripted upstream asks for them; the final answer is
written from the tool results), driven by the official ``openai`` client; ``hatchway mcp probe``
lists and calls the same tools.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import HATCHWAY
from tests.support.node_tools import node_bin, node_env, package_file
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import accepts_connections, free_port, wait_until

TRANSPORTS = ["stdio", "streamable_http", "sse"]


@dataclass
class Everything:
    """Where the server is, as a plugin ``mcp_servers[]`` entry and as ``hatchway mcp probe`` options."""

    entry: dict[str, Any]
    probe_target: list[str]


@pytest.fixture(params=TRANSPORTS)
def everything(request: pytest.FixtureRequest) -> Iterator[Everything]:
    script = package_file("@modelcontextprotocol/server-everything", "dist/index.js")
    node = str(node_bin() / "node")
    transport = request.param
    if transport == "stdio":
        entry = {"command": node, "args": [str(script), "stdio"]}
        yield Everything(entry, ["--command", node, f"--arg={script}", "--arg=stdio"])
        return
    port = free_port()
    mode = "streamableHttp" if transport == "streamable_http" else "sse"
    process = subprocess.Popen(
        [node, str(script), mode],
        env={**node_env(), "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: accepts_connections(port) or process.poll() is not None, timeout=120)
        assert process.poll() is None, f"server-everything ({mode}) exited with {process.returncode}"
        if transport == "sse":
            url = f"http://127.0.0.1:{port}/sse"
            yield Everything({"url": url, "transport": "sse"}, [url, "--sse"])
        else:
            url = f"http://127.0.0.1:{port}/mcp"
            yield Everything({"url": url}, [url])
    finally:
        process.terminate()
        process.wait(timeout=60)


def tool_outputs(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def answer(llm: ScriptedLLM) -> None:
    """First model call: ask for both tools; second: answer from what they returned."""

    def handler(body: dict[str, Any]) -> Reply:
        if not tool_outputs(body):
            return Reply(
                tool_calls=[
                    ("everything__echo", {"message": "hello from hatchway"}),
                    ("everything__get-sum", {"a": 19, "b": 23}),
                ]
            )
        return Reply(text="Tools said: " + " | ".join(tool_outputs(body)))

    llm.handler = handler


def test_a_loop_calls_echo_and_get_sum_through_the_gateway(
    everything: Everything, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    plugin = {
        "version": "1",
        "mcp_servers": [
            {"id": "everything", **everything.entry, "tools": ["echo", "get-sum"], "timeout_ms": 20_000}
        ],
    }
    (tmp_path / "everything.yaml").write_text(yaml.safe_dump(plugin))
    gateway = gateway_factory(
        routing_rules=[{"name": "interop", "match": {"model": "gpt-4o"}, "plugin": "everything.yaml"}]
    )
    answer(llm)

    completion = gateway.client().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "echo something and add 19 and 23"}]
    )

    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert offered == {"everything__echo", "everything__get-sum"}
    text = completion.choices[0].message.content or ""
    assert "Echo: hello from hatchway" in text
    assert "The sum of 19 and 23 is 42." in text
    assert completion.choices[0].finish_reason == "stop"


def test_the_probe_lists_and_calls_its_tools(everything: Everything, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            *HATCHWAY,
            "mcp",
            "probe",
            *everything.probe_target,
            "--call",
            "get-sum",
            "--args",
            '{"a": 2, "b": 3}',
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**node_env(), "COLUMNS": "200"},
        check=False,
    )

    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert "everything" in first.lower() and "protocol 20" in first
    assert "│ echo " in result.stdout and "│ get-sum " in result.stdout
    assert "The sum of 2 and 3 is 5." in result.stdout
