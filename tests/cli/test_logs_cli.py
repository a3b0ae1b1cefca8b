"""``hatchway logs``: the request log from the database, as a table or JSON, with the API's filters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import ScriptedLLM

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def hatchway(gateway: RunningGateway, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hatchway", "logs", *args, "--config", str(gateway.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "250"},
    )


def test_logs_table_json_and_filters(gateway: RunningGateway, llm: ScriptedLLM) -> None:
    assert gateway.org is not None
    llm.reply("plain answer", prompt_tokens=3, completion_tokens=2)
    llm.reply(tool_calls=[("get_weather", {})])
    client = gateway.client(default_headers={"X-On-Behalf-Of": "rui"})
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "a"}])
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "b"}], tools=[WEATHER]
    )
    gateway.stop()  # the log writer flushes on shutdown; the CLI reads the database directly
    org = gateway.org.org_name

    every = json.loads(hatchway(gateway, "--org", org, "--json").stdout)
    assert [r["finish_reason"] for r in every] == ["tool_calls", "stop"]
    assert every[1]["usage"]["total_tokens"] == 5 and every[1]["on_behalf_of"] == "rui"
    assert every[0]["steps"][0]["type"] == "model_call"

    tools_only = json.loads(hatchway(gateway, "--org", org, "--has-tool-calls", "--json").stdout)
    assert [r["id"] for r in tools_only] == [every[0]["id"]]
    without = json.loads(hatchway(gateway, "--org", org, "--no-tool-calls", "--json").stdout)
    assert [r["id"] for r in without] == [every[1]["id"]]
    assert json.loads(hatchway(gateway, "--org", org, "--model", "other", "--json").stdout) == []
    assert len(json.loads(hatchway(gateway, "--org", org, "--limit", "1", "--json").stdout)) == 1
    future = json.loads(hatchway(gateway, "--org", org, "--since", "2999-01-01", "--json").stdout)
    assert future == []

    table = hatchway(gateway, "--org", org, "--on-behalf-of", "rui")
    assert table.returncode == 0
    assert every[0]["id"] in table.stdout and every[1]["id"] in table.stdout
    assert "tool_calls" in table.stdout and "rui" in table.stdout

    bad_status = hatchway(gateway, "--org", org, "--status", "done")
    assert bad_status.returncode != 0 and "--status: must be one of ok, error" in bad_status.stderr
    bad_time = hatchway(gateway, "--org", org, "--since", "last week")
    assert bad_time.returncode != 0 and "--since: not an ISO 8601 time" in bad_time.stderr
    unknown_org = hatchway(gateway, "--org", "nobody")
    assert unknown_org.returncode != 0 and "Traceback" not in unknown_org.stderr
