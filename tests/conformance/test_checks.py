"""What counts as a passed conformance scenario (the suite's own summary ticks an empty one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conformance.checks import ScenarioReport

SUCCESS = {"id": "a", "status": "SUCCESS", "description": "fine"}


@pytest.mark.parametrize(
    ("checks", "passed"),
    [
        ([], False),  # no checks at all proves nothing
        ([{"id": "i", "status": "INFO"}], False),
        ([SUCCESS, {"id": "b", "status": "WARNING", "description": "late"}], False),
        ([SUCCESS, {"id": "c", "status": "FAILURE", "description": "wrong"}], False),
        ([SUCCESS, {"id": "i", "status": "INFO"}], True),
    ],
)
def test_a_scenario_passes_only_with_a_success_and_no_warning_or_failure(
    checks: list[dict[str, str]], passed: bool, tmp_path: Path
) -> None:
    (tmp_path / "checks.json").write_text(json.dumps(checks))

    report = ScenarioReport.load("s", tmp_path / "checks.json")

    assert (report.problems() == []) is passed
    assert ("FAILED" not in report.summary()) is passed
