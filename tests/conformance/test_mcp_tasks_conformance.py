"""The suite's ten ``tasks-*`` server scenarios through a Hatchway MCP endpoint.

``/mcp/tasks`` fronts ``mcp_tasks_upstream.py`` (the official SDK with the tasks extension on its
hooks; ``test_mcp_tasks_upstream.py`` runs the same scenarios straight against it: the baseline,
every one passes but ``tasks-status-notifications``, which the suite itself skips). Through the
gateway, each task the upstream makes is relayed behind a task id of Hatchway's, kept in the
database (``mcp_server/tasks.py``). The suite cannot send a header, so it reaches the endpoint
through ``bearer_proxy`` (the Hatchway key added, ``Host``/``Origin`` passed through).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.checks import REPORTS
from tests.conformance.mcp_tasks_upstream import build_app
from tests.conformance.server_suite import load_reports, run_suite
from tests.conformance.test_mcp_tasks_upstream import SKIPPED_BY_THE_SUITE, TASK_SCENARIOS
from tests.support.agent_loop import write_plugin
from tests.support.bearer_proxy import bearer_proxy
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.servers import ServerThread

NO_MODEL = "http://127.0.0.1:9/v1"  # no run here calls a model


@pytest.fixture(scope="module")
def tasks_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("tasks-endpoint")
    with ServerThread(build_app(), host="127.0.0.1", timeout_graceful_shutdown=1) as upstream:
        plugin = write_plugin(
            home, "tasks", {"mcp_servers": [{"id": "tasks", "url": f"{upstream.url}/mcp", "max_retries": 0}]}
        )
        config = base_config(
            home,
            NO_MODEL,
            allow_private_mcp_urls=True,
            mcp_endpoints=[{"name": "tasks", "plugin": plugin, "namespace": False}],
        )
        gateway = RunningGateway(write_config(home, config, "hatchway.yaml")).start()
        try:
            with ServerThread(bearer_proxy(gateway.url, gateway.key), host="127.0.0.1") as proxy:
                yield f"http://localhost:{proxy.port}/mcp/tasks"
        finally:
            gateway.stop()


@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_every_tasks_scenario_passes_through_a_hatchway_endpoint(
    scenario: str, tasks_endpoint: str, tmp_path: Path
) -> None:
    options = ("--scenario", scenario, "--spec-version", "2026-07-28", "--force")
    log = run_suite(tasks_endpoint, tmp_path, *options)
    report = load_reports(tmp_path).get(scenario)
    assert report is not None, f"the suite wrote no report for {scenario}\n{log[-3000:]}"
    if scenario in SKIPPED_BY_THE_SUITE:
        raw = json.loads(next(tmp_path.rglob("checks.json")).read_text(encoding="utf-8"))
        assert [c["status"] for c in raw] == ["SKIPPED"]
        return
    if report.problems():  # once more alone (a loaded machine can miss a timing check)
        again = tmp_path / "again"
        log = run_suite(tasks_endpoint, again, *options)
        report = load_reports(again).get(scenario) or report
    REPORTS.append(report)
    assert not report.problems(), "\n".join(report.problems()) + "\n" + log[-3000:]
