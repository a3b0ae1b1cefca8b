"""The example accounts MCP server, driven directly with the official ``mcp`` client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples.contas_server import split_subject
from mcp import Client

from tests.support.contas import RunningContas
from tests.support.paths import ROOT
from tests.support.servers import free_port, wait_until

pytestmark = pytest.mark.anyio


async def _call(url: str, tool: str, arguments: dict[str, Any], **meta: Any) -> tuple[bool, Any]:
    async with Client(url, cache=None) as client:
        result = await client.call_tool(tool, arguments, meta=meta or None)  # type: ignore[arg-type]
    return bool(result.is_error), result.structured_content


def test_split_subject() -> None:
    assert split_subject("Produto A, Produto B e Produto C") == ["Produto A", "Produto B", "Produto C"]
    assert split_subject("Produto A and Produto B; Produto C y Produto D") == [
        "Produto A",
        "Produto B",
        "Produto C",
        "Produto D",
    ]
    assert split_subject("  ") == []


async def test_lists_its_tools(contas: RunningContas) -> None:
    async with Client(contas.url, cache=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert {
        "validar_vas_subject",
        "validar_vas_para_lote",
        "cancelar_vas_avulso",
        "cancelar_vas_lote",
        "cancelar_vas_fluxo",
        "consultar_pedidos",
        "estatisticas",
    } <= names


async def test_the_validator_expands_the_subject_without_side_effects(contas: RunningContas) -> None:
    error, answer = await _call(
        contas.url, "validar_vas_subject", {"subject": "Produto A, Produto B e Produto C"}
    )
    assert not error and answer["eligible"] is True and answer["status"] == "ELIGIBLE"
    decision = answer["transaction_decision"]
    assert decision["resolved_arguments"]["items"] == [
        {"name": "Produto A", "id": "1001"},
        {"name": "Produto B", "id": "1002"},
        {"name": "Produto C", "id": "1003"},
    ]
    assert (
        decision["confirmation_message"]
        == "Você confirma o cancelamento de Produto A, Produto B e Produto C?"
    )
    assert contas.backend.stats()["total_executions"] == 0

    _, partial = await _call(contas.url, "validar_vas_subject", {"subject": "Produto A e Produto Z"})
    assert partial["eligible"] is True and partial["status"] == "PARTIALLY_ELIGIBLE"
    assert partial["items"][1] == {
        "name": "Produto Z",
        "eligible": False,
        "reason": "Produto Z não está contratado nesta conta",
    }
    _, none = await _call(contas.url, "validar_vas_subject", {"subject": "Produto Z"})
    assert none["eligible"] is False and "Produto Z" in none["reason"]


async def test_cancelling_reports_per_item_and_counts_executions_per_key(contas: RunningContas) -> None:
    error, result = await _call(
        contas.url,
        "cancelar_vas_avulso",
        {"subject": "Produto A, Produto B e Produto C"},
        idempotency_key="op_1",
    )
    assert not error
    assert result["results"] == [
        {"name": "Produto A", "id": "1001", "success": True},
        {"name": "Produto B", "id": "1002", "success": False, "error": "not_found"},
        {"name": "Produto C", "id": "1003", "success": True},
    ]
    await _call(
        contas.url,
        "cancelar_vas_lote",
        {"items": ["Produto D", {"name": "Produto A"}]},
        idempotency_key="op_2",
    )
    stats = contas.backend.stats()
    assert stats["executions"] == {"op_1": 1, "op_2": 1}
    assert stats["cancelled"] == ["Produto A", "Produto C", "Produto D", "Produto A"]
    _, via_tool = await _call(contas.url, "estatisticas", {})
    assert via_tool["executions"] == {"op_1": 1, "op_2": 1}
    assert httpx.get(contas.server.url + "/stats").json()["total_executions"] == 2


async def test_the_workflow_tool_nests_results_and_fails_afterwards(contas: RunningContas) -> None:
    _, result = await _call(contas.url, "cancelar_vas_fluxo", {"subject": "Produto A e Produto C"})
    assert result["ok"] is False and "notificar_cliente" in result["error"]
    output = result["workflow"]["output"]
    assert [r["success"] for r in output["cancelar_vas_fluxo"]["results"]] == [True, True]
    assert output["notificar_cliente"]["results"][0]["success"] is False


async def test_validator_for_the_batch_api_names_its_target(contas: RunningContas) -> None:
    _, answer = await _call(contas.url, "validar_vas_para_lote", {"subject": "Produto A e Produto C"})
    decision = answer["transaction_decision"]
    assert decision["target_tool"] == "cancelar_vas_lote"
    assert decision["resolved_arguments"] == {
        "items": [{"name": "Produto A", "id": "1001"}, {"name": "Produto C", "id": "1003"}]
    }


async def test_orders_are_read_only_with_ok_per_item(contas: RunningContas) -> None:
    _, result = await _call(contas.url, "consultar_pedidos", {"ids": ["1001", "9999"]})
    assert result["results"] == [
        {"id": "1001", "ok": True, "status": "entregue"},
        {"id": "9999", "ok": False, "error": "not_found"},
    ]
    assert contas.backend.stats()["total_executions"] == 0


def test_runs_as_a_module_on_a_port(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.contas_server", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:

        def up() -> bool:
            assert proc.poll() is None, "the example server exited early"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/stats", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=120, message="examples.contas_server to answer /stats")
        import anyio

        error, result = anyio.run(
            _call, f"http://127.0.0.1:{port}/mcp", "consultar_pedidos", {"ids": ["1002"]}
        )
        assert not error and result["results"][0]["status"] == "em trânsito"
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
