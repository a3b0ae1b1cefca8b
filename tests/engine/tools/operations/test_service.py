"""The operation flow against the example MCP server: requires → pre-validation → confirmation →
one execution → per-item verdict, plus every way it stops before executing."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
import yaml

from hatchway.config.agent_files import AgentTools, agent_files_in, load_agent_tools
from hatchway.config.agents import OperationSettings
from hatchway.engine.items import FunctionCall, FunctionCallOutput
from hatchway.engine.tools.operations.models import OperationStatus, operation_to_dict
from hatchway.engine.tools.operations.replies import ReplyEffect
from hatchway.engine.tools.operations.service import OperationService, ResultKind
from hatchway.engine.tools.operations.store import OperationQuery, OperationStore
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from tests.support.contas import ABC, RunningContas
from tests.support.operations import make_ctx
from tests.support.paths import EXAMPLE_AGENT

pytestmark = pytest.mark.anyio
S = OperationStatus


@pytest.fixture
def database_url(tmp_path: Path) -> str:  # the flow is backend-agnostic; test_store covers PostgreSQL
    return f"sqlite+aiosqlite:///{tmp_path / 'ops.db'}"


@pytest.fixture
def service(db: Database, agent_tools: AgentTools) -> OperationService:
    return OperationService("contas", agent_tools, OperationStore(db))


def _agent_with_policy(tmp_path: Path, tool: str, policy: dict) -> AgentTools:
    """The example agent with one tool's policy replaced."""
    for name in ("tools.yaml", "plugin.yaml"):
        (tmp_path / name).write_text((EXAMPLE_AGENT / name).read_text())
    policies = yaml.safe_load((EXAMPLE_AGENT / "tool_policies.yaml").read_text())
    policies["tool_policies"][tool] = policy
    (tmp_path / "tool_policies.yaml").write_text(yaml.safe_dump(policies))
    return load_agent_tools(agent_files_in(tmp_path))


async def test_expand_confirm_execute_once_partial_success(
    service: OperationService, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    step = await service.call("cancelar_vas_avulso", ABC, ctx, caller, call_id="call_1")

    assert step.kind is ResultKind.NEEDS_CONFIRMATION
    assert step.question == "Você confirma o cancelamento de Produto A, Produto B e Produto C?"
    assert json.loads(step.output)["status"] == "AWAITING_CONFIRMATION"
    assert contas.backend.stats()["total_executions"] == 0  # only the validator ran
    assert [c["tool"] for c in caller.calls] == ["validar_vas_subject"]

    reply = await service.reply("Sim!", ctx, caller)
    assert reply is not None and reply.effect is ReplyEffect.CONFIRMED
    op = reply.operation
    assert op.state is S.COMPLETED and op.verdict["status"] == "PARTIAL_SUCCESS"
    assert contas.backend.executions == {op.id: 1}  # once, keyed by the operation id
    primary = caller.calls[-1]
    assert primary["tool"] == "cancelar_vas_avulso"
    assert primary["meta"]["idempotency_key"] == op.id == primary["meta"]["io.hatchway/operation_id"]
    assert primary["arguments"] == op.resolved_arguments  # the frozen, validated arguments

    record = operation_to_dict(op)
    assert record["arguments"] == ABC
    assert [i["name"] for i in record["resolved_arguments"]["items"]] == [
        "Produto A",
        "Produto B",
        "Produto C",
    ]
    canonical = orjson.dumps(record["resolved_arguments"], option=orjson.OPT_SORT_KEYS)
    assert record["arguments_digest"] == hashlib.sha256(canonical).hexdigest()
    assert record["confirmation_message"] == step.question
    assert [i["eligible"] for i in record["pre_validation"]["items"]] == [True, True, True]
    assert record["requested_by"] == record["confirmed_by"] == "user-7" and record["confirmed_via"] == "reply"
    assert record["policy"]["source"] == "tool_policies.yaml"
    assert all(record[k] for k in ("created_at", "confirmed_at", "started_at", "completed_at", "expires_at"))
    assert [(i["name"], i["success"], i.get("error")) for i in record["items"]] == [
        ("Produto A", True, None),
        ("Produto B", False, "not_found"),
        ("Produto C", True, None),
    ]
    assert record["verdict"]["multi_item"] == {
        "status": "PARTIAL_SUCCESS",
        "items_count": 3,
        "items_succeeded_count": 2,
        "items_failed_count": 1,
        "primary_tool": "cancelar_vas_avulso",
    }
    assert record["result"]["results"][1]["error"] == "not_found"

    call, output = reply.items
    assert isinstance(call, FunctionCall) and isinstance(output, FunctionCallOutput)
    assert call.call_id == output.call_id == f"call_{op.id}" and call.name == "cancelar_vas_avulso"
    summary = json.loads(output.output)
    assert summary["verdict"] == "PARTIAL_SUCCESS"
    assert [(i["name"], i["success"]) for i in summary["items"]] == [
        ("Produto A", True),
        ("Produto B", False),
        ("Produto C", True),
    ]

    # The same bare "sim" again (a double submit): that confirmation's outcome, not a new execution.
    again = await service.reply("sim", ctx, caller)
    assert again is not None and again.effect is ReplyEffect.DECIDED and again.operation.id == op.id
    assert again.answer is not None and "executed once: COMPLETED, PARTIAL_SUCCESS" in again.answer
    assert contas.backend.executions == {op.id: 1}


async def test_no_cancels_and_nothing_runs(service: OperationService, contas: RunningContas) -> None:
    caller, ctx = contas.caller(), make_ctx()
    await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    reply = await service.reply("não", ctx, caller)
    assert reply is not None and reply.effect is ReplyEffect.CANCELLED
    assert reply.operation.state is S.CANCELLED and "user's reply" in reply.operation.status_reason
    assert json.loads(reply.items[1].output)["status"] == "CANCELLED"
    assert contas.backend.stats()["total_executions"] == 0


async def test_an_ambiguous_reply_asks_again_and_keeps_it_pending(
    service: OperationService, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    step = await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    reply = await service.reply("sim, mas não o B", ctx, caller)
    assert reply is not None and reply.effect is ReplyEffect.ASK_AGAIN
    assert reply.answer == step.question and reply.items == []
    assert reply.operation.state is S.AWAITING_CONFIRMATION
    assert contas.backend.stats()["total_executions"] == 0
    confirmed = await service.reply("sim", ctx, caller)
    assert confirmed is not None and confirmed.effect is ReplyEffect.CONFIRMED
    assert contas.backend.stats()["total_executions"] == 1


async def test_the_reply_is_bound_to_its_conversation_and_organisation(
    service: OperationService, contas: RunningContas
) -> None:
    caller = contas.caller()
    await service.call("cancelar_vas_avulso", ABC, make_ctx(session="s-1"), caller)
    assert await service.reply("sim", make_ctx(session="s-2"), caller) is None
    assert await service.reply("sim", make_ctx(org_id="org_b", session="s-1"), caller) is None
    assert await service.reply("sim", make_ctx(session=None), caller) is None
    assert contas.backend.stats()["total_executions"] == 0


async def test_a_new_request_supersedes_the_pending_one(
    service: OperationService, contas: RunningContas
) -> None:
    """The model calling the tool again (even with the same arguments) never confirms anything."""
    caller, ctx = contas.caller(), make_ctx()
    first = await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    second = await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    assert second.kind is ResultKind.NEEDS_CONFIRMATION
    old = await service.store.get(first.operation.id)  # type: ignore[union-attr]
    assert old.state is S.CANCELLED and old.status_reason.startswith("superseded")
    assert contas.backend.stats()["total_executions"] == 0
    reply = await service.reply("sim", ctx, caller)
    assert reply is not None and reply.operation.id == second.operation.id  # type: ignore[union-attr]
    assert contas.backend.executions == {reply.operation.id: 1}


async def test_not_eligible_is_out_of_scope_and_nothing_runs(
    service: OperationService, contas: RunningContas
) -> None:
    step = await service.call("cancelar_vas_avulso", {"subject": "Produto Z"}, make_ctx(), contas.caller())
    assert step.kind is ResultKind.OUT_OF_SCOPE and step.is_error
    op = step.operation
    assert op is not None and op.state is S.OUT_OF_SCOPE
    assert op.status_reason == "Produto Z não está contratado nesta conta"
    assert op.pre_validation["items"] == [
        {"name": "Produto Z", "eligible": False, "reason": "Produto Z não está contratado nesta conta"}
    ]
    assert json.loads(step.output)["reason"] == op.status_reason
    assert contas.backend.stats()["total_executions"] == 0


async def test_partly_eligible_keeps_the_non_actionable_items_with_reasons(
    service: OperationService, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    step = await service.call("cancelar_vas_avulso", {"subject": "Produto A e Produto Z"}, ctx, caller)
    assert step.kind is ResultKind.NEEDS_CONFIRMATION and "Produto Z não está contratado" in (
        step.question or ""
    )
    op = step.operation
    assert op is not None and op.pre_validation["status"] == "PARTIALLY_ELIGIBLE"
    assert [i["eligible"] for i in op.pre_validation["items"]] == [True, False]
    reply = await service.reply("sim", ctx, caller)
    assert reply is not None and reply.operation.verdict["status"] == "SUCCESS"
    assert [i["name"] for i in reply.operation.items] == ["Produto A"]


async def test_validator_down_with_fail_open_false_fails_and_nothing_runs(
    service: OperationService, contas: RunningContas
) -> None:
    dead = contas.caller()
    dead.servers["contas"] = "http://127.0.0.1:9/mcp"  # nothing listens there
    step = await service.call("cancelar_vas_avulso", ABC, make_ctx(), dead)
    assert step.kind is ResultKind.FAILED and step.is_error
    op = step.operation
    assert op is not None and op.state is S.FAILED
    assert op.error["code"] == "validator_failed" and "validator unavailable" in op.status_reason
    assert [c["tool"] for c in dead.calls] == ["validar_vas_subject"]
    assert contas.backend.stats()["total_executions"] == 0


async def test_validator_failure_with_fail_open_true_continues_with_the_original_arguments(
    db: Database, tmp_path: Path, contas: RunningContas
) -> None:
    agent = _agent_with_policy(
        tmp_path,
        "cancelar_vas_avulso",
        {
            "operation_type": "transactional",
            "require_confirmation": True,
            "requires": ["subject"],
            "pre_validation": {"tool": "validador_inexistente", "fail_open": True},
        },
    )
    service = OperationService("contas", agent, OperationStore(db))
    caller, ctx = contas.caller(), make_ctx()
    step = await service.call("cancelar_vas_avulso", {"subject": "Produto A e Produto C"}, ctx, caller)
    assert step.kind is ResultKind.NEEDS_CONFIRMATION
    op = step.operation
    assert op is not None and op.resolved_arguments == {"subject": "Produto A e Produto C"}
    assert op.pre_validation["fail_open_used"] is True and "error" in op.pre_validation["failure"]
    assert "Produto A e Produto C" in (step.question or "")  # the framework wrote the question
    reply = await service.reply("yes", ctx, caller)
    assert reply is not None and reply.operation.verdict["status"] == "SUCCESS"


async def test_a_missing_required_argument_is_not_executed(
    service: OperationService, contas: RunningContas
) -> None:
    caller = contas.caller()
    step = await service.call("cancelar_vas_avulso", {"subject": "  "}, make_ctx(), caller)
    assert step.kind is ResultKind.MISSING_ARGUMENTS and step.is_error
    error = json.loads(step.output)["error"]
    assert error["code"] == "missing_arguments" and error["missing"] == ["subject"]
    assert "Ask the user" in error["message"] and "Quais serviços" in error["message"]
    assert step.operation is not None and step.operation.state is S.COLLECTING_PARAMETERS
    assert step.operation.status_reason == "missing: subject"
    assert caller.calls == []  # not even the validator

    query = await service.call("consultar_pedidos", {}, make_ctx(), caller)
    assert query.kind is ResultKind.MISSING_ARGUMENTS and json.loads(query.output)["error"]["missing"] == [
        "ids"
    ]
    assert caller.calls == []


async def test_a_batch_tool_without_validator_lists_every_item(
    service: OperationService, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    items = [{"name": "Produto A", "id": "1001"}, {"name": "Produto B", "id": "1002"}, "Produto D"]
    step = await service.call("cancelar_vas_lote", json.dumps({"items": items}), ctx, caller)
    assert step.kind is ResultKind.NEEDS_CONFIRMATION
    question = step.question or ""
    assert "3 item(s)" in question
    assert "- Produto A (1001)" in question and "- Produto B (1002)" in question and "- Produto D" in question
    reply = await service.reply("ok", ctx, caller)
    assert reply is not None and reply.operation.verdict["status"] == "PARTIAL_SUCCESS"
    assert contas.backend.executions == {reply.operation.id: 1}


async def test_a_workflow_tool_keeps_item_successes_despite_a_later_failure(
    service: OperationService, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    await service.call("cancelar_vas_fluxo", {"subject": "Produto A e Produto C"}, ctx, caller)
    reply = await service.reply("confirmo", ctx, caller)
    assert reply is not None
    verdict = reply.operation.verdict
    assert verdict["source"] == "workflow.output.cancelar_vas_fluxo.results"
    assert verdict["status"] == "PARTIAL_SUCCESS" and verdict["original_ok"] is False
    assert verdict["multi_item"]["items_succeeded_count"] == 2
    assert "notificar_cliente" in verdict["secondary_error"]
    meta = caller.calls[-1]["meta"]
    assert meta["io.hatchway/workflow"] == "cancelamento_vas" and meta["io.hatchway/workflow_version"] == 1


async def test_the_validator_can_send_execution_to_another_tool(
    db: Database, tmp_path: Path, contas: RunningContas
) -> None:
    agent = _agent_with_policy(
        tmp_path,
        "cancelar_vas_avulso",
        {
            "type": "transactional",
            "requires_confirmation": True,
            "pre_validation": {"tool": "validar_vas_para_lote"},
        },
    )
    service = OperationService("contas", agent, OperationStore(db))
    caller, ctx = contas.caller(), make_ctx()
    step = await service.call("cancelar_vas_avulso", {"subject": "Produto A e Produto C"}, ctx, caller)
    assert step.operation is not None and step.operation.tool == "cancelar_vas_lote"
    assert step.operation.policy["requested_tool"] == "cancelar_vas_avulso"
    reply = await service.reply("sim", ctx, caller)
    assert reply is not None and caller.calls[-1]["tool"] == "cancelar_vas_lote"
    assert reply.operation.verdict["multi_item"]["primary_tool"] == "cancelar_vas_lote"


async def test_a_read_only_query_runs_directly_with_a_verdict_and_no_record(
    service: OperationService, contas: RunningContas
) -> None:
    step = await service.call(
        "consultar_pedidos", {"ids": ["1001", "1003", "9999"]}, make_ctx(), contas.caller()
    )
    assert step.kind is ResultKind.EXECUTED and step.operation is None and not step.is_error
    assert json.loads(step.output)["results"][0]["status"] == "entregue"  # the model reads the data
    assert step.meta["multi_item"]["items_succeeded_count"] == 2 and step.meta["verdict"] == "PARTIAL_SUCCESS"
    assert await service.store.list("org_a", OperationQuery()) == []


async def test_an_expired_confirmation_cannot_be_given(
    db: Database, agent_tools: AgentTools, contas: RunningContas
) -> None:
    caller, ctx = contas.caller(), make_ctx()
    service = OperationService(
        "contas", agent_tools, OperationStore(db), OperationSettings(confirmation_ttl_seconds=60)
    )
    await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    later = OperationService(
        "contas", agent_tools, OperationStore(db, clock=lambda: utcnow() + timedelta(minutes=2))
    )
    reply = await later.reply("sim", ctx, caller)
    assert reply is not None and reply.effect is ReplyEffect.EXPIRED
    assert reply.operation.state is S.CANCELLED and reply.operation.status_reason.startswith("expired")
    assert contas.backend.stats()["total_executions"] == 0


async def test_configured_words_confirm(db: Database, agent_tools: AgentTools, contas: RunningContas) -> None:
    settings = OperationSettings.model_validate({"confirmation_words": {"yes": ["bora"]}})
    service = OperationService("contas", agent_tools, OperationStore(db), settings)
    caller, ctx = contas.caller(), make_ctx()
    await service.call("cancelar_vas_avulso", ABC, ctx, caller)
    reply = await service.reply("bora!", ctx, caller)
    assert reply is not None and reply.effect is ReplyEffect.CONFIRMED
    assert contas.backend.stats()["total_executions"] == 1


async def test_unknown_tools_and_bad_arguments_are_errors_for_the_model(
    service: OperationService, contas: RunningContas
) -> None:
    unknown = await service.call("apagar_tudo", {}, make_ctx(), contas.caller())
    assert (
        unknown.kind is ResultKind.INVALID and json.loads(unknown.output)["error"]["code"] == "unknown_tool"
    )
    bad = await service.call("cancelar_vas_avulso", "{not json", make_ctx(), contas.caller())
    assert bad.kind is ResultKind.INVALID and json.loads(bad.output)["error"]["code"] == "invalid_arguments"


async def test_a_transactional_tool_without_confirmation_runs_at_once_and_is_recorded(
    db: Database, tmp_path: Path, contas: RunningContas
) -> None:
    agent = _agent_with_policy(
        tmp_path, "cancelar_vas_lote", {"operation_type": "transactional", "require_confirmation": False}
    )
    service = OperationService("contas", agent, OperationStore(db))
    step = await service.call("cancelar_vas_lote", {"items": ["Produto C"]}, make_ctx(), contas.caller())
    assert step.kind is ResultKind.EXECUTED and step.question is None
    op = step.operation
    assert op is not None and op.state is S.COMPLETED and op.confirmed_via == "policy"
    assert op.verdict["status"] == "SUCCESS" and contas.backend.executions == {op.id: 1}


async def test_a_validator_naming_an_unknown_target_fails_without_executing(
    db: Database, tmp_path: Path, contas: RunningContas
) -> None:
    agent = _agent_with_policy(
        tmp_path,
        "cancelar_vas_avulso",
        {
            "type": "transactional",
            "requires_confirmation": True,
            "pre_validation": {"tool": "validar_vas_para_lote"},
        },
    )
    agent.tools["cancelar_vas_lote"].enabled = False
    service = OperationService("contas", agent, OperationStore(db))
    step = await service.call("cancelar_vas_avulso", {"subject": "Produto A"}, make_ctx(), contas.caller())
    assert step.kind is ResultKind.FAILED
    assert step.operation is not None and "cancelar_vas_lote" in step.operation.status_reason
    assert contas.backend.stats()["total_executions"] == 0
