"""``hatchway usage``: the organisation's spend from the database, as a Rich table or as the API's JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx

from tests.api.test_usage import MODELS, local_usd, table_usd
from tests.support.agent_loop import USER
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM


def hatchway(gateway: RunningGateway, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hatchway", "usage", *args, "--config", str(gateway.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_usage_prints_the_table_and_the_apis_json(gateway_factory, llm: ScriptedLLM) -> None:
    llm.handler = lambda _: Reply("ok", prompt_tokens=11, completion_tokens=7)
    gateway = gateway_factory(models=MODELS)
    assert gateway.org is not None
    for model, user in (("mini", "alice"), ("mini", "alice"), ("local", "bob"), ("mystery", "bob")):
        client = gateway.client(default_headers={"X-On-Behalf-Of": user})
        client.chat.completions.create(model=model, messages=USER)
    auth = {"authorization": f"Bearer {gateway.key}"}
    api = httpx.get(f"{gateway.url}/v1/usage", params={"group_by": "user"}, headers=auth).json()
    gateway.stop()  # the log writer flushes on shutdown; the CLI reads the database directly
    org = gateway.org.org_name

    table = hatchway(gateway, "--org", org)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    [mini] = [line for line in lines if " mini " in line]
    assert f"{2 * table_usd(11, 7):.6f}" in mini and " 2 " in mini and " 36 " in mini
    [local] = [line for line in lines if " local " in line]
    assert f"{local_usd(11, 7):.6f}" in local
    [mystery] = [line for line in lines if " mystery " in line]
    assert "unknown" in mystery and mystery.rstrip(" │").endswith("1")  # one unpriced request
    [total] = [line for line in lines if " total " in line]
    assert f"{2 * table_usd(11, 7) + local_usd(11, 7):.6f}" in total and " 72 " in total
    assert "genai-prices 0." in table.stdout

    printed = json.loads(hatchway(gateway, "--org", org, "--group-by", "user", "--json").stdout)
    assert printed == api
    assert local_usd(11, 7) > 2 * table_usd(11, 7)
    assert [g["user"] for g in printed["data"]] == ["bob", "alice"]  # the costliest first
    future = json.loads(hatchway(gateway, "--org", org, "--since", "2999-01-01", "--json").stdout)
    assert future["data"] == [] and future["totals"]["requests"] == 0

    bad = hatchway(gateway, "--org", org, "--group-by", "team")
    assert bad.returncode == 1 and "--group-by: must be one of key, user, agent, model" in bad.stderr
    backwards = hatchway(gateway, "--org", org, "--since", "2026-02-01", "--until", "2026-01-01")
    assert backwards.returncode == 1 and "--until" in backwards.stderr
