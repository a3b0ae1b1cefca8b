"""classify_results, case by case: where items are read, how each counts, what the verdict is."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hatchway.engine.tools.operations.classify import VerdictStatus, classify_results

TOOL = "cancelar_vas_avulso"


def _items(*flags: bool, key: str = "success") -> list[dict[str, Any]]:
    names = "ABCDEFG"
    return [
        {"name": f"Produto {names[i]}", key: flag} | ({} if flag else {"error": "not_found"})
        for i, flag in enumerate(flags)
    ]


def test_all_succeeded_is_success_with_counts() -> None:
    verdict = classify_results({"results": _items(True, True, True)}, TOOL)
    assert verdict.status is VerdictStatus.SUCCESS
    assert verdict.source == "results"
    assert verdict.multi_item() == {
        "status": "SUCCESS",
        "items_count": 3,
        "items_succeeded_count": 3,
        "items_failed_count": 0,
        "primary_tool": TOOL,
    }


def test_mixed_is_partial_success_and_keeps_each_item() -> None:
    verdict = classify_results({"results": _items(True, False, True)}, TOOL)
    assert verdict.status is VerdictStatus.PARTIAL_SUCCESS
    assert [(i.name, i.success, i.error) for i in verdict.items] == [
        ("Produto A", True, None),
        ("Produto B", False, "not_found"),
        ("Produto C", True, None),
    ]
    assert verdict.multi_item()["items_failed_count"] == 1


def test_all_failed_is_failed() -> None:
    verdict = classify_results({"results": _items(False, False)}, TOOL)
    assert verdict.status is VerdictStatus.FAILED
    assert verdict.multi_item()["items_succeeded_count"] == 0


def test_ok_counts_like_success_and_success_wins_when_both_are_given() -> None:
    with_ok = classify_results({"results": _items(True, False, key="ok")}, TOOL)
    assert with_ok.status is VerdictStatus.PARTIAL_SUCCESS
    both = classify_results({"results": [{"id": "1", "success": False, "ok": True}]}, TOOL)
    assert both.status is VerdictStatus.FAILED


def test_an_item_without_a_boolean_is_not_counted_as_succeeded() -> None:
    verdict = classify_results(
        {"results": [{"name": "A", "success": True}, {"name": "B", "success": "yes"}]}, TOOL
    )
    assert verdict.status is VerdictStatus.PARTIAL_SUCCESS
    unknown = verdict.items[1].to_dict()
    assert unknown["success"] is None and unknown["outcome"] == "unknown"
    assert "no boolean" in unknown["error"]


def test_workflow_output_of_the_primary_tool_comes_first() -> None:
    result = {
        "results": _items(False, False),  # a summary that would say FAILED
        "workflow": {"output": {TOOL: {"results": _items(True, True)}}},
    }
    verdict = classify_results(result, TOOL)
    assert verdict.status is VerdictStatus.SUCCESS
    assert verdict.source == f"workflow.output.{TOOL}.results"


def test_results_under_another_tools_key_never_decide_the_primary() -> None:
    result = {
        "workflow": {
            "output": {
                TOOL: {"results": _items(True, True)},
                "notificar_cliente": {"results": _items(False)},
            }
        }
    }
    assert classify_results(result, TOOL).status is VerdictStatus.SUCCESS
    only_other = {
        "ok": True,
        "workflow": {"output": {"notificar_cliente": {"results": _items(False, False)}}},
    }
    verdict = classify_results(only_other, TOOL)
    assert verdict.status is VerdictStatus.SUCCESS and verdict.items == ()
    assert any("notificar_cliente" in note for note in verdict.notes)


def test_outer_failure_after_item_successes_is_partial_and_keeps_the_error() -> None:
    result = {
        "ok": False,
        "error": "notificar_cliente: gateway de SMS indisponível",
        "workflow": {"output": {TOOL: {"results": _items(True, True)}}},
    }
    verdict = classify_results(result, TOOL)
    assert verdict.status is VerdictStatus.PARTIAL_SUCCESS
    assert verdict.original_ok is False
    assert verdict.secondary_error == "notificar_cliente: gateway de SMS indisponível"
    assert verdict.multi_item()["items_succeeded_count"] == 2  # the later failure erased nothing
    body = verdict.to_dict()
    assert body["original_ok"] is False and body["secondary_error"].startswith("notificar_cliente")


def test_outer_failure_with_no_item_succeeded_is_failed() -> None:
    verdict = classify_results({"ok": False, "error": "boom", "results": _items(False)}, TOOL)
    assert verdict.status is VerdictStatus.FAILED
    assert verdict.secondary_error is None and verdict.error == "boom"


@pytest.mark.parametrize(("flag", "expected"), [(True, VerdictStatus.SUCCESS), (False, VerdictStatus.FAILED)])
def test_a_single_item_is_classified_too(flag: bool, expected: VerdictStatus) -> None:
    verdict = classify_results({"results": _items(flag)}, TOOL)
    assert verdict.status is expected
    assert verdict.multi_item()["items_count"] == 1


@pytest.mark.parametrize(
    ("result", "is_error", "expected"),
    [
        ({"ok": True, "protocolo": "123"}, False, VerdictStatus.SUCCESS),
        ({"success": False, "error": "sem saldo"}, False, VerdictStatus.FAILED),
        ({"isError": True}, False, VerdictStatus.FAILED),
        ("backend exploded", True, VerdictStatus.FAILED),
        ("feito", False, VerdictStatus.SUCCESS),
        ({"results": [], "ok": False}, False, VerdictStatus.FAILED),
    ],
)
def test_without_results_the_outer_flag_decides_and_says_so(
    result: Any, is_error: bool, expected: VerdictStatus
) -> None:
    verdict = classify_results(result, TOOL, is_error=is_error)
    assert verdict.status is expected
    assert verdict.items == () and verdict.source in ("outer", "results")
    assert any("decided from the outer" in note for note in verdict.notes)


CASES = [
    {"results": _items(True, False, True)},
    {"ok": False, "error": {"code": "x"}, "workflow": {"output": {TOOL: {"results": _items(True)}}}},
    {
        "workflow": {"output": {"other": {"results": _items(False)}}},
        "results": [{"name": "A", "ok": True}, 3],
    },
    {"results": [{"name": "A", "success": False, "error": {"code": "not_found", "detail": [1, 2]}}]},
]


@pytest.mark.parametrize("result", CASES)
def test_the_input_is_never_mutated_and_the_verdict_serialises(result: dict[str, Any]) -> None:
    before = copy.deepcopy(result)
    verdict = classify_results(result, TOOL)
    assert result == before
    body = verdict.to_dict()
    json.dumps(body)
    body["items"].append("x")  # the verdict's dict is a copy too
    if isinstance(body.get("secondary_error"), dict):
        body["secondary_error"]["code"] = "changed"
    assert result == before
