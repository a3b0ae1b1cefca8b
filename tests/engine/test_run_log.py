"""The run log's step types: each kind's JSON, and the outcome vocabulary every tool call uses."""

from __future__ import annotations

import pytest

from hatchway.engine.context import MAX_SIDE_STEPS, RunState
from hatchway.engine.items import Usage
from hatchway.engine.run_log import (
    ListToolsStep,
    Outcome,
    SideCallStep,
    ToolCallStep,
    ToolDriftStep,
    record_steps,
)
from hatchway.engine.tools.operations.classify import VerdictStatus
from hatchway.engine.tools.operations.service import ResultKind


@pytest.mark.parametrize("value", [*ResultKind, *VerdictStatus])
def test_every_operation_result_and_verdict_is_an_outcome(value: str) -> None:
    """A transactional tool's outcome is its result's kind (the loop) or its verdict (an MCP
    endpoint): a value either adds is one the run log can record."""
    assert Outcome(value).value == value


def test_a_tool_step_reads_its_meta_and_keeps_the_rest() -> None:
    meta = {"server": "s", "tool": "t", "outcome": Outcome.TOOL_ERROR, "retries": 2, "error_code": "x"}
    step = ToolCallStep.of(
        meta,
        round=3,
        call_id=None,
        name="s__t",
        arguments="{}",
        duration_ms=1.5,
        is_error=True,
        result_preview="no",
        arguments_size=(9000, "ab"),
    )
    assert step.to_dict() == {
        "type": "tool_call",
        "round": 3,
        "call_id": None,
        "name": "s__t",
        "server": "s",
        "tool": "t",
        "arguments": "{}",
        "arguments_chars": 9000,
        "arguments_sha256": "ab",
        "duration_ms": 1.5,
        "outcome": "tool_error",
        "cached": False,
        "retries": 2,
        "result_preview": "no",
        "error_code": "x",
    }
    assert meta["server"] == "s"  # the result's meta is read, not consumed


def test_the_run_stamps_a_listing_with_its_round_and_keeps_the_records_order() -> None:
    run = RunState()
    run.report(SideCallStep("sampling", "m", usage=Usage(prompt_tokens=1)))
    run.round = 2
    run.report(ToolDriftStep("s", "t", "drifted", withheld=False))
    run.report(ListToolsStep.dropped("s", ["x-tenant"]))
    run.report(ListToolsStep.failed("s", "gone"))

    assert run.dropped_headers == {"s": ["x-tenant"]}
    assert [(s["type"], s.get("round")) for s in record_steps(run.log, 0, [])] == [
        ("list_tools", 2),  # failures first, then dropped headers, drifts, side calls
        ("list_tools", 2),
        ("tool_drift", None),
        ("sampling", None),
    ]


def test_side_calls_past_the_kept_ones_are_counted() -> None:
    run = RunState()
    for _ in range(MAX_SIDE_STEPS + 3):
        run.report(SideCallStep("sampling", "m", usage=Usage(prompt_tokens=1)))
    assert (run.side_calls, run.side_calls_omitted, run.usage.prompt_tokens) == (MAX_SIDE_STEPS + 3, 3, 103)
    assert len(run.reported(SideCallStep)) == MAX_SIDE_STEPS
