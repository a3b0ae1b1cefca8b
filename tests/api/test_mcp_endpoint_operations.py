"""Transactional tools through an MCP endpoint: the ``contas`` agent's tools.yaml tools served at
``/mcp/contas`` to the official MCP Python SDK's client, on both protocol revisions, with the
confirmation put to the MCP client's user — MRTR elicitation (2026-07-28), ``elicitation/create``
(2025-11-25 sessions), or the ``confirm_operation`` tool for clients that cannot be asked — and
the chat path's rules: only the end user the operation was requested for decides it, and it
executes once, reported per item."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.contas import ABC, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_rpc import rpc

TOOL = "cancelar_vas_avulso"


def _gateway(contas: RunningContas, gateway_factory: Any, tmp_path: Path) -> RunningGateway:
    return gateway_factory(
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[{"name": "contas", "agent": "contas"}],
    )


async def _session(
    gateway: RunningGateway,
    mode: str,
    action: Callable[[Client], Any],
    *,
    user: str | None = "alice",
    elicitation: Callable[..., Any] | None = None,
) -> Any:
    headers = {"authorization": f"Bearer {gateway.key}"}
    if user is not None:
        headers["x-on-behalf-of"] = user
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    transport = streamable_http_client(f"{gateway.url}/mcp/contas", http_client=http)
    async with Client(transport, mode=mode, elicitation_callback=elicitation) as client:  # type: ignore[arg-type]
        return await action(client)


def _answering(accept: bool, asked: list[str]) -> Callable[..., Any]:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        if not accept:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"confirm": True})

    return elicit


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # MRTR input_required, and elicitation/create
def test_a_transactional_tool_asks_the_clients_user_and_executes_once_per_item(
    mode: str, contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway = _gateway(contas, gateway_factory, tmp_path)
    asked: list[str] = []

    async def use(client: Client) -> tuple[list[str], types.CallToolResult]:
        names = [t.name for t in (await client.list_tools()).tools]
        return names, await client.call_tool(TOOL, ABC)

    names, result = asyncio.run(_session(gateway, mode, use, elicitation=_answering(True, asked)))
    # tools.yaml's tools, under their policies, and none of the plugin's raw tools (no bypass)
    assert TOOL in names and "consultar_pedidos" in names and names == sorted(names)
    assert not any("__" in name for name in names)
    assert asked == [QUESTION]  # the confirmation question reached the client's user
    body = result.structured_content
    assert body is not None and not result.is_error
    assert body["status"] == "COMPLETED" and body["verdict"] == "PARTIAL_SUCCESS"
    outcome = {item["name"]: item["success"] for item in body["results"]}
    assert outcome == {"Produto A": True, "Produto B": False, "Produto C": True}
    assert contas.backend.executions == {body["operation_id"]: 1}  # executed once
    op = httpx.get(
        f"{gateway.url}/v1/operations/{body['operation_id']}",
        headers={"authorization": f"Bearer {gateway.key}"},
    ).json()
    assert op["confirmed_via"] == "mcp" and op["confirmed_by"] == "alice" and op["requested_by"] == "alice"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_declined_confirmation_cancels_and_executes_nothing(
    mode: str, contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway = _gateway(contas, gateway_factory, tmp_path)
    asked: list[str] = []

    async def use(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, ABC)

    result = asyncio.run(_session(gateway, mode, use, elicitation=_answering(False, asked)))
    assert asked == [QUESTION]
    assert result.is_error and result.structured_content is not None
    assert result.structured_content["status"] == "CANCELLED"
    assert contas.backend.executions == {}


def test_a_client_that_cannot_be_asked_gets_the_question_and_confirms_with_the_tool(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway = _gateway(contas, gateway_factory, tmp_path)

    async def ask(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, ABC)

    pending = asyncio.run(_session(gateway, "auto", ask))  # no elicitation callback: none declared
    body = pending.structured_content
    assert body is not None and body["status"] == "AWAITING_CONFIRMATION" and body["question"] == QUESTION
    assert contas.backend.executions == {}
    decision = {"operation_id": body["operation_id"], "arguments_digest": body["arguments_digest"]}

    def confirm(user: str | None, **extra: Any) -> types.CallToolResult:
        async def call(client: Client) -> types.CallToolResult:
            return await client.call_tool("confirm_operation", {**decision, "decision": "confirm", **extra})

        return asyncio.run(_session(gateway, "auto", call, user=user))

    refused = confirm("bob")  # another end user's acceptance
    assert refused.is_error and "confirmation_not_yours" in refused.content[0].text
    assert confirm(None).is_error  # nor the key acting for no one
    forged = confirm("alice", arguments_digest="0" * 64)
    assert forged.is_error and "arguments_digest_mismatch" in forged.content[0].text
    assert contas.backend.executions == {}
    done = confirm("alice")
    assert done.structured_content is not None and done.structured_content["verdict"] == "PARTIAL_SUCCESS"
    again = confirm("alice")  # a retry returns the outcome; it never runs again
    assert again.structured_content is not None and again.structured_content["status"] == "COMPLETED"
    assert contas.backend.executions == {body["operation_id"]: 1}


def _post(gateway: RunningGateway, user: str, params: dict[str, Any]) -> dict[str, Any]:
    """A raw 2026-07-28 stateless ``tools/call``, as any client sends it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    response = httpx.post(
        f"{gateway.url}/mcp/contas",
        json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {**params, "_meta": meta}},
        headers={
            "authorization": f"Bearer {gateway.key}",
            "x-on-behalf-of": user,
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": params["name"],
        },
        timeout=30,
    )
    assert response.status_code in (200, 400), response.text  # 400: a JSON-RPC error in the body
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"id"' in line)
    return httpx.Response(200, content=text).json()


def test_the_sealed_confirmation_state_answers_only_for_the_user_it_was_asked_of(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway = _gateway(contas, gateway_factory, tmp_path)
    asked = _post(gateway, "alice", {"name": TOOL, "arguments": ABC})["result"]
    assert asked["resultType"] == "input_required"
    assert asked["inputRequests"]["confirm"]["params"]["message"] == QUESTION
    state = asked["requestState"]
    assert "op_" not in state  # sealed: the client cannot read (or forge) which operation it names
    answer = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    retry = {"name": TOOL, "arguments": ABC, "inputResponses": answer, "requestState": state}
    stolen = _post(gateway, "bob", retry)
    assert stolen["error"]["code"] == types.INVALID_PARAMS
    tampered = _post(gateway, "alice", {**retry, "requestState": state[:-4] + "AAAA"})
    assert tampered["error"]["code"] == types.INVALID_PARAMS
    assert contas.backend.executions == {}
    done = _post(gateway, "alice", retry)["result"]
    assert done["structuredContent"]["verdict"] == "PARTIAL_SUCCESS"
    assert sum(contas.backend.executions.values()) == 1
    replayed = _post(gateway, "alice", retry)["result"]  # the same answer again: the outcome, not a rerun
    assert replayed["structuredContent"]["status"] == "COMPLETED"
    assert sum(contas.backend.executions.values()) == 1


def _claude_code_settings(gateway: RunningGateway, user: str) -> tuple[str, dict[str, str]]:
    """The ``.mcp.json`` docs/mcp-endpoints.md gives for Claude Code, expanded as Claude Code does."""
    import json
    import re

    from tests.support.paths import ROOT

    doc = (ROOT / "docs" / "mcp-endpoints.md").read_text(encoding="utf-8")
    block = next(
        b for b in re.findall(r"```json\n(.*?)```", doc, re.S) if '"type": "http"' in b and "${" in b
    )
    server = json.loads(block)["mcpServers"]["hatchway"]
    env = {"HATCHWAY_KEY": gateway.key, "USER": user}

    def expand(value: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], value)

    assert server["type"] == "http"
    url = server["url"].replace("https://gateway.example.com", gateway.url)
    return url, {name: expand(value) for name, value in server["headers"].items()}


def test_claude_codes_documented_settings_list_call_and_confirm(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    """What Claude Code does with the documented configuration, done by the Python SDK with exactly
    those settings: list, a plain tool, a transactional one accepted and declined, and another
    user's acceptance refused."""
    gateway = _gateway(contas, gateway_factory, tmp_path)

    async def with_settings(user: str, action: Callable[[Client], Any], accept: bool | None = None) -> Any:
        url, headers = _claude_code_settings(gateway, user)
        elicit = _answering(accept, []) if accept is not None else None
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with Client(
            streamable_http_client(url, http_client=http), elicitation_callback=elicit
        ) as client:  # type: ignore[arg-type]
            return await action(client)

    async def listed_and_plain(client: Client) -> tuple[list[str], Any]:
        names = [t.name for t in (await client.list_tools()).tools]
        return names, await client.call_tool("consultar_pedidos", {"ids": ["1001", "9999"]})

    names, plain = asyncio.run(with_settings("alice", listed_and_plain))
    assert {TOOL, "consultar_pedidos", "confirm_operation"} <= set(names)
    assert not plain.is_error and "not_found" in plain.content[0].text

    def call(client: Client) -> Any:
        return client.call_tool(TOOL, ABC)

    accepted = asyncio.run(with_settings("alice", call, accept=True)).structured_content
    assert accepted["verdict"] == "PARTIAL_SUCCESS" and len(accepted["results"]) == 3
    assert contas.backend.executions == {accepted["operation_id"]: 1}
    declined = asyncio.run(with_settings("alice", call, accept=False)).structured_content
    assert declined["status"] == "CANCELLED"
    pending = asyncio.run(with_settings("alice", call)).structured_content  # no elicitation declared
    assert pending["status"] == "AWAITING_CONFIRMATION"

    async def bob_confirms(client: Client) -> Any:
        arguments = {k: pending[k] for k in ("operation_id", "arguments_digest")} | {"decision": "confirm"}
        return await client.call_tool("confirm_operation", arguments)

    refused = asyncio.run(with_settings("bob", bob_confirms))
    assert refused.is_error and "confirmation_not_yours" in refused.content[0].text
    assert contas.backend.executions == {accepted["operation_id"]: 1}  # nothing else ever ran


def test_confirmations_repeated_while_it_executes_each_get_the_outcome(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    """A client's user double-clicks, or its SDK retries: every ``confirm_operation`` of the same
    operation, sent at once while the first executes, is answered with the finished outcome."""
    gateway = _gateway(contas, gateway_factory, tmp_path)
    contas.backend.hold_seconds = 1.5  # a slow backend: the copies arrive while it executes

    async def ask(client: Client) -> types.CallToolResult:
        return await client.call_tool(TOOL, ABC)

    body = asyncio.run(_session(gateway, "auto", ask)).structured_content
    assert body is not None
    decision = {"operation_id": body["operation_id"], "arguments_digest": body["arguments_digest"]}

    async def confirm(client: Client) -> types.CallToolResult:
        return await client.call_tool("confirm_operation", {**decision, "decision": "confirm"})

    async def together() -> list[types.CallToolResult]:
        return list(await asyncio.gather(*(_session(gateway, "auto", confirm) for _ in range(4))))

    results = asyncio.run(together())
    assert [r.structured_content and r.structured_content["status"] for r in results] == ["COMPLETED"] * 4
    assert all(r.structured_content["verdict"] == "PARTIAL_SUCCESS" for r in results)  # type: ignore[index]
    assert contas.backend.executions == {body["operation_id"]: 1}


TASKS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def test_an_operation_awaiting_confirmation_is_a_task_the_clients_user_answers_once(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    """A client with the tasks extension: the pending operation is a task in ``input_required``
    whose one input request is the confirmation; ``tasks/update`` decides it, executed once, and
    the task completes with the per-item verdict; another end user cannot read or answer it."""
    gateway = _gateway(contas, gateway_factory, tmp_path)
    url, key = f"{gateway.url}/mcp/contas", gateway.key

    def send(method: str, params: dict[str, Any], name: str, user: str = "alice") -> dict[str, Any]:
        _, answer, text = rpc(url, key, method, params, name=name, capabilities=TASKS, user=user)
        assert answer is not None, text
        return answer

    created = send("tools/call", {"name": TOOL, "arguments": ABC}, TOOL)["result"]
    assert created["resultType"] == "task" and created["status"] == "input_required", created
    task_id = created["taskId"]
    asked = send("tasks/get", {"taskId": task_id}, task_id)["result"]
    assert asked["status"] == "input_required" and asked["resultType"] == "complete"
    [(key_name, request)] = asked["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == QUESTION
    assert contas.backend.executions == {}  # nothing runs before the answer

    assert send("tasks/get", {"taskId": task_id}, task_id, user="bob")["error"]["code"] == -32602
    answer = {key_name: {"action": "accept", "content": {"confirm": True}}}
    refused = send("tasks/update", {"taskId": task_id, "inputResponses": answer}, task_id, user="bob")
    assert refused["error"]["code"] == -32602 and contas.backend.executions == {}

    ack = send("tasks/update", {"taskId": task_id, "inputResponses": answer}, task_id)
    assert ack["result"]["resultType"] == "complete"
    again = send("tasks/update", {"taskId": task_id, "inputResponses": answer}, task_id)  # a double click
    assert again["result"]["resultType"] == "complete"
    done = send("tasks/get", {"taskId": task_id}, task_id)["result"]
    assert done["status"] == "completed", done
    body = done["result"]["structuredContent"]
    assert body["status"] == "COMPLETED" and body["verdict"] == "PARTIAL_SUCCESS"
    assert contas.backend.executions == {body["operation_id"]: 1}  # executed once


def test_cancelling_an_operations_task_withdraws_it(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway = _gateway(contas, gateway_factory, tmp_path)
    url, key = f"{gateway.url}/mcp/contas", gateway.key
    _, created, _ = rpc(
        url, key, "tools/call", {"name": TOOL, "arguments": ABC}, name=TOOL, capabilities=TASKS, user="alice"
    )
    assert created is not None
    task_id = created["result"]["taskId"]
    _, ack, _ = rpc(
        url, key, "tasks/cancel", {"taskId": task_id}, name=task_id, capabilities=TASKS, user="alice"
    )
    assert ack is not None and ack["result"]["resultType"] == "complete"
    _, read, _ = rpc(
        url, key, "tasks/get", {"taskId": task_id}, name=task_id, capabilities=TASKS, user="alice"
    )
    assert read is not None and read["result"]["status"] == "cancelled"
    assert contas.backend.executions == {}
