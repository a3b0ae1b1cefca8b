"""The official MCP client conformance suite against Hatchway's client (``hatchway mcp probe``).

Two referees, both pinned in ``.ci/node-tools.json``:

- ``@modelcontextprotocol/conformance@0.2.0-alpha.12`` with ``--requirements 2026-07-28``: exactly
  the 32 client scenarios the 2026-07-28 revision froze (stateless wire, MRTR, standard and custom
  headers, and 25 authorization-code flows), plus the seven it runs unscored, which must pass too:
  client credentials (secret and private key), DPoP with and without nonces, workload identity
  federation (jwt-bearer), enterprise-managed authorization (ID-JAG) and JSON Schema 2020-12
  preservation;
- ``@modelcontextprotocol/conformance@0.1.16``'s ``core`` suite at the 2025 wire, so servers of
  that era keep working.

The suite runs its scenarios in parallel, starts each scenario's server, runs
``mcp_client_adapter.py <url>``, and writes the checks it observed to one ``checks.json`` per
scenario, which decides the test (``checks.py``). A scenario that fails among the parallel ones is
run once more alone, as the Python SDK's own CI does: timing checks can miss on a loaded machine,
and a real failure fails again.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conformance.checks import REPORTS, ScenarioReport
from tests.support.node_tools import node_bin, node_env, package_file

ADAPTER = Path(__file__).with_name("mcp_client_adapter.py")
SUITE_2026 = "@modelcontextprotocol/conformance-2026"  # npm alias of 0.2.0-alpha.12
SUITE_2025 = "@modelcontextprotocol/conformance"  # 0.1.16
MUST_PASS_UNSCORED = {
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/enterprise-managed-authorization",
    "auth/wif-jwt-bearer",
    "json-schema-2020-12-preservation",
}
_STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def _suite(package: str, options: list[str], output: Path) -> str:
    suite = package_file(package, "dist/index.js")
    if " " in sys.executable + str(ADAPTER):  # the suite splits its --command on spaces
        pytest.skip(f"the conformance suite cannot run paths with spaces: {sys.executable} {ADAPTER}")
    run = subprocess.run(
        [
            str(node_bin() / "node"),
            str(suite),
            "client",
            "--command",
            f"{sys.executable} {ADAPTER}",
            *options,
            "--timeout",
            "60000",
            "-o",
            str(output),
        ],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return run.stdout + run.stderr


def _reports(output: Path) -> dict[str, ScenarioReport]:
    """Each scenario's report, by name (the directory is the name plus a timestamp)."""
    found: dict[str, ScenarioReport] = {}
    for path in sorted(output.rglob("checks.json")):
        name = _STAMP.sub("", str(path.parent.relative_to(output)))
        found[name] = ScenarioReport.load(name, path)
    return found


def _run_and_judge(package: str, options: list[str], required: set[str], tmp_path: Path) -> None:
    log = _suite(package, options, tmp_path / "suite")
    reports = _reports(tmp_path / "suite")
    missing = required - reports.keys()
    assert not missing, f"scenarios the suite did not run: {sorted(missing)}\n{log[-4000:]}"
    for name in sorted(required):
        report = reports[name]
        if report.problems():  # once more alone (see the module docstring)
            solo = tmp_path / "solo" / name.replace("/", "_")
            solo_log = _suite(package, ["--scenario", name], solo)
            again = _reports(solo).get(name)
            assert again is not None, f"{name}: no checks on the solo run\n{solo_log[-4000:]}"
            report, log = again, solo_log
        REPORTS.append(report)
        assert report.problems() == [], f"{report.summary()}\n{log[-4000:]}"


def _frozen_client_scenarios() -> set[str]:
    requirements = package_file(SUITE_2026, "requirements/2026-07-28.yaml")
    frozen = yaml.safe_load(requirements.read_text(encoding="utf-8"))
    return set(frozen["client"])


def _unscored_client_scenarios() -> set[str]:
    requirements = package_file(SUITE_2026, "requirements/2026-07-28.yaml")
    frozen = yaml.safe_load(requirements.read_text(encoding="utf-8"))
    return {entry["scenario"] for entry in frozen["not_scored"] if entry.get("leg") == "client"}


def test_the_client_passes_every_scored_2026_07_28_scenario(tmp_path: Path) -> None:
    scored = _frozen_client_scenarios()
    assert len(scored) == 32, sorted(scored)  # what the 2026-07-28 revision froze
    assert _unscored_client_scenarios() == MUST_PASS_UNSCORED  # every extension the suite runs

    _run_and_judge(SUITE_2026, ["--requirements", "2026-07-28"], scored | MUST_PASS_UNSCORED, tmp_path)


CORE_2025 = {
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
}


def test_the_client_still_passes_the_2025_core_suite(tmp_path: Path) -> None:
    _run_and_judge(SUITE_2025, ["--suite", "core"], CORE_2025, tmp_path)
