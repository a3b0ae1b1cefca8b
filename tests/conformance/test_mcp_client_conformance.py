"""The official MCP client conformance suite against Hatchway's client (``hatchway mcp probe``).

Each scenario runs on its own (the ``sse-retry`` timing check is sensitive on a loaded machine):
the suite starts the scenario's server, runs ``mcp_client_adapter.py <url>``, and writes the
checks it observed to ``checks.json``, which decides the test (see ``checks.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.checks import REPORTS, ScenarioReport
from tests.support.node_tools import node_bin, node_env, package_file

ADAPTER = Path(__file__).with_name("mcp_client_adapter.py")
REQUIRED = [
    "initialize",
    "tools_call",
    "sse-retry",
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
]


def run_scenario(scenario: str, output: Path) -> tuple[ScenarioReport, str]:
    suite = package_file("@modelcontextprotocol/conformance", "dist/index.js")
    if " " in sys.executable + str(ADAPTER):  # the suite splits its --command on spaces
        pytest.skip(f"the conformance suite cannot run paths with spaces: {sys.executable} {ADAPTER}")
    command = f"{sys.executable} {ADAPTER}"
    run = subprocess.run(
        [
            str(node_bin() / "node"),
            str(suite),
            "client",
            "--command",
            command,
            "--scenario",
            scenario,
            "--timeout",
            "30000",
            "-o",
            str(output),
        ],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    log = run.stdout + run.stderr
    found = sorted(output.rglob("checks.json"))
    assert len(found) == 1, f"expected one checks.json for {scenario}, found {found}\n{log}"
    return ScenarioReport.load(scenario, found[0]), log


@pytest.mark.parametrize("scenario", REQUIRED)
def test_the_client_passes_the_conformance_scenario(scenario: str, tmp_path: Path) -> None:
    report, log = run_scenario(scenario, tmp_path)
    REPORTS.append(report)

    assert report.problems() == [], f"{report.summary()}\n{log}"
