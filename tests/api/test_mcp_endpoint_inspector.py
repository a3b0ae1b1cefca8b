"""``@modelcontextprotocol/inspector``'s CLI (npm, pinned in .ci/node-tools.json) as a real client of
a Hatchway MCP endpoint, on both protocol eras it speaks: ``legacy`` (2025-11-25 sessions, its
default for a URL) and ``modern`` (2026-07-28 stateless requests).

Every call is one ``mcp-inspector --cli <url> --transport http --header ... --method ...
--format json`` run under the Node 22 of the Node tools, asserted on its JSON output (the result on
stdout; an error envelope ``{"error": {"code", "message"}}`` on stderr) and its exit code (0; 3
``auth_required``; 5 a tool result with ``isError``). The CLI declares neither elicitation nor
sampling (its source passes ``elicit: false, sample: false``), so a transactional tool gives it the
question to ask and it confirms with the ``confirm_operation`` tool. ``--stored-auth-only`` keeps it
from starting an OAuth login on a 401 (the CLI's advice for CI); ``HOME`` is a temporary folder,
since it keeps a catalog and OAuth state under ``~/.mcp-inspector``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.contas import ABC, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import UPSTREAM_TOKEN, calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.node_tools import node_bin, node_env, package_file

TOOL = "cancelar_vas_avulso"
ERAS = ["legacy", "modern"]  # --protocol-era: 2025-11-25 sessions, 2026-07-28 stateless


def inspector(
    url: str,
    *args: str,
    key: str,
    home: Path,
    era: str = "legacy",
    headers: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """One run of ``mcp-inspector --cli`` (the launcher bin ``npx @modelcontextprotocol/inspector``
    runs) against ``url`` with ``key`` as bearer and any further ``"Name: value"`` headers."""
    launcher = package_file("@modelcontextprotocol/inspector", "clients/launcher/build/index.js")
    home.mkdir(exist_ok=True)
    command = [
        str(node_bin() / "node"),
        str(launcher),
        "--cli",
        url,
        "--transport",
        "http",  # only a URL ending in /mcp is detected as streamable HTTP; /mcp/{name} is not
        "--header",
        f"Authorization: Bearer {key}",
        *headers,
        "--protocol-era",
        era,
        "--stored-auth-only",
        "--format",
        "json",
        *args,
    ]
    return subprocess.run(
        command,
        env={**node_env(), "HOME": str(home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


def result_of(run: subprocess.CompletedProcess[str], exit_code: int = 0) -> dict[str, Any]:
    """The ``result`` of the CLI's JSON output, checking its exit code."""
    assert run.returncode == exit_code, f"exit {run.returncode}\nstdout: {run.stdout}\nstderr: {run.stderr}"
    output = json.loads(run.stdout)
    assert set(output) == {"result"}
    result: dict[str, Any] = output["result"]
    return result


def call(name: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    return ("--method", "tools/call", "--tool-name", name, "--tool-args-json", json.dumps(arguments))


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_lists_and_calls_the_endpoints_tools(
    era: str, mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    upstream, gateway = calc_endpoint(mcp_server_factory, gateway_factory, tmp_path)
    url, home = f"{gateway.url}/mcp/tools", tmp_path / "home"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return inspector(url, *args, key=gateway.key, home=home, era=era)

    listed = result_of(cli("--method", "tools/list"))
    assert [t["name"] for t in listed["tools"]] == ["calc__add", "calc__echo"]  # namespaced, sorted
    assert listed["tools"][0]["inputSchema"]["required"] == ["a", "b"]

    # --tool-arg's key=value pairs, coerced to the schema's integers
    added = result_of(cli("--method", "tools/call", "--tool-name", "calc__add", "--tool-arg", "a=2", "b=3"))
    assert added["isError"] is False
    assert added["content"] == [{"type": "text", "text": "5"}] and added["structuredContent"] == {"result": 5}

    echoed = result_of(cli(*call("calc__echo", {"text": f"say {UPSTREAM_TOKEN}"})))
    assert echoed["isError"] is False
    assert echoed["content"][0]["text"].startswith("echo:say ")
    assert UPSTREAM_TOKEN not in json.dumps(echoed)  # a vault secret echoed upstream is redacted
    assert set(upstream.bearers()) == {UPSTREAM_TOKEN}  # the vault's bearer upstream, not the key
    assert gateway.key not in json.dumps([r.headers for r in upstream.requests])  # no passthrough

    # What the inspector declared is what the gateway declared upstream for its calls: no
    # elicitation, no sampling (so an upstream would never ask it for input it cannot give).
    forwarded = upstream.calls_of("tools/call")[-1].meta["io.modelcontextprotocol/clientCapabilities"]
    assert "elicitation" not in forwarded and "sampling" not in forwarded
    assert forwarded["roots"] == {"listChanged": True}  # the inspector's own declaration


@pytest.mark.parametrize("era", ERAS)
def test_the_inspector_gets_the_question_and_confirms_with_the_tool(
    era: str, contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway: RunningGateway = gateway_factory(
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[{"name": "contas", "agent": "contas"}],
    )
    url, home = f"{gateway.url}/mcp/contas", tmp_path / "home"

    def as_user(user: str, *args: str) -> subprocess.CompletedProcess[str]:
        on_behalf = (f"X-On-Behalf-Of: {user}",)  # --header is variadic: beside the bearer
        return inspector(url, *args, key=gateway.key, home=home, era=era, headers=on_behalf)

    names = [t["name"] for t in result_of(as_user("alice", "--method", "tools/list"))["tools"]]
    assert TOOL in names and "confirm_operation" in names and names == sorted(names)

    pending = result_of(as_user("alice", *call(TOOL, ABC)))  # the CLI cannot be asked: it gets the question
    assert pending["isError"] is False
    body = pending["structuredContent"]
    assert body["status"] == "AWAITING_CONFIRMATION" and body["question"] == QUESTION
    assert body["tool"] == TOOL and body["results"] == []
    assert json.loads(pending["content"][0]["text"])["operation_id"] == body["operation_id"]
    assert contas.backend.executions == {}  # nothing ran before the user's answer
    decision = {
        "operation_id": body["operation_id"],
        "arguments_digest": body["arguments_digest"],
        "decision": "confirm",
    }

    refused = as_user("bob", *call("confirm_operation", decision))  # another end user's acceptance
    assert json.loads(refused.stderr)["error"]["code"] == "tool_is_error"
    refused_result = result_of(refused, exit_code=5)  # the CLI's exit code for an isError result
    assert refused_result["isError"] is True
    assert json.loads(refused_result["content"][0]["text"])["error"]["code"] == "confirmation_not_yours"
    assert contas.backend.executions == {}

    done = result_of(as_user("alice", *call("confirm_operation", decision)))
    assert done["isError"] is False
    outcome = done["structuredContent"]
    assert outcome["status"] == "COMPLETED" and outcome["verdict"] == "PARTIAL_SUCCESS"
    assert [(i["name"], i["success"], i.get("error")) for i in outcome["results"]] == [
        ("Produto A", True, None),
        ("Produto B", False, "not_found"),
        ("Produto C", True, None),
    ]
    assert contas.backend.executions == {body["operation_id"]: 1}  # executed once
    op = httpx.get(
        f"{gateway.url}/v1/operations/{body['operation_id']}",
        headers={"authorization": f"Bearer {gateway.key}"},
    ).json()
    assert op["confirmed_via"] == "mcp" and op["requested_by"] == "alice" and op["confirmed_by"] == "alice"


def test_a_wrong_key_fails_the_inspector_with_a_clear_error(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway: RunningGateway = gateway_factory(
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[{"name": "contas", "agent": "contas"}],
    )
    home = tmp_path / "home"
    run = inspector(f"{gateway.url}/mcp/contas", "--method", "tools/list", key="hw-not-a-key", home=home)
    assert run.returncode == 3 and run.stdout == ""  # 3: auth_required
    error = json.loads(run.stderr)["error"]
    assert error["code"] == "auth_required"
    assert "Incorrect API key provided" in error["message"] and "invalid_api_key" in error["message"]
    assert "hw-not-a-key" not in run.stderr
    assert not any(p.is_file() for p in home.rglob("*"))  # no OAuth login started, nothing stored
