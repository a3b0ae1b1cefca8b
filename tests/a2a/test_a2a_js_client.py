"""The official JavaScript A2A client (``@a2a-js/sdk``) drives a Hatchway agent end to end over
real HTTP, on both bindings: send, stream cut mid-way and resubscribed, get, list, cancel."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.node_tools import node_bin, node_env, package_file, tools_dir
from tests.support.paths import ROOT
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port

SCRIPT = ROOT / "tests" / "support" / "a2a_js_client.mjs"
COMPLETED, CANCELED, SUBMITTED, WORKING = 3, 5, 1, 2  # TaskState's numbers in the JS SDK


@pytest.fixture
def a2a_gateway(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    port = free_port()
    agent = {"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}
    config = base_config(tmp_path, llm.base_url, public_base_url=f"http://127.0.0.1:{port}", agents=[agent])
    gateway = RunningGateway(write_config(tmp_path, config), port=port).start()
    yield gateway
    gateway.stop()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_the_javascript_client_sends_streams_resubscribes_reads_and_cancels(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    package_file("@a2a-js/sdk", "package.json")  # skips (or fails in CI) when not installed
    held = threading.Event()
    replies = iter(
        [
            Reply(text="the first answer"),
            Reply(text="streamed in five pieces", chunk_size=5, delay=1.0),
            Reply(text="never sent", gate=held),
        ]
    )
    llm.handler = lambda body: next(replies)
    env = {
        **node_env(),
        "A2A_AGENT_URL": f"{a2a_gateway.url}/a2a/helper",
        "A2A_KEY": a2a_gateway.key,
        "A2A_BINDING": binding,
        "NODE_PATH": str(tools_dir() / "node_modules"),
    }
    # The script imports the SDK from .ci/node: run it from there (ES modules ignore NODE_PATH).
    script = tools_dir() / f"a2a_js_client-{uuid.uuid4().hex[:8]}.mjs"
    script.write_text(SCRIPT.read_text())
    try:
        done = subprocess.run(
            [str(node_bin() / "node"), str(script)], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        held.set()
        script.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr[-3000:]
    steps: dict[str, Any] = {s["step"]: s for s in map(json.loads, done.stdout.splitlines())}
    assert steps["send"]["state"] == COMPLETED and steps["send"]["text"] == "the first answer"
    assert steps["resubscribe"]["firstCase"] == "task"
    assert steps["resubscribe"]["state"] == COMPLETED
    assert steps["resubscribe"]["text"] == "streamed in five pieces"
    assert steps["get"] == {
        "step": "get",
        "id": steps["send"]["id"],
        "state": COMPLETED,
        "text": "the first answer",
    }
    assert steps["list"]["ids"] == [steps["resubscribe"]["id"], steps["send"]["id"]]
    assert steps["cancel"]["before"] in (SUBMITTED, WORKING) and steps["cancel"]["state"] == CANCELED
