"""The official MCP conformance suite's **server** mode against a Hatchway MCP endpoint.

``@modelcontextprotocol/conformance@0.2.0-alpha.12 server --requirements 2026-07-28`` runs the 37
server scenarios the 2026-07-28 revision froze. Hatchway's endpoint ``/mcp/everything`` fronts
``mcp_everything_upstream.py`` (written with the official SDK; it holds every fixture the scenarios
call) with ``namespace: false`` (the suite calls the fixtures by their own names), resources and
prompts passed through. The suite is run twice: against the upstream directly, which sets the
baseline, and through Hatchway; every scenario that passes directly must pass through Hatchway.

The suite cannot send a header, so it reaches the endpoint through ``bearer_proxy`` (which adds the
Hatchway key and passes ``Host``/``Origin`` through untouched: dns-rebinding-protection tests the
gateway's own checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conformance.checks import REPORTS
from tests.conformance.mcp_everything_upstream import build_app
from tests.conformance.server_suite import SUITE, load_reports, run_suite
from tests.support.agent_loop import write_plugin
from tests.support.bearer_proxy import bearer_proxy
from tests.support.gateway import RunningGateway
from tests.support.node_tools import package_file
from tests.support.servers import ServerThread


def _frozen_server_scenarios() -> set[str]:
    frozen = yaml.safe_load(package_file(SUITE, "requirements/2026-07-28.yaml").read_text(encoding="utf-8"))
    return set(frozen["server"])


def test_every_scenario_the_upstream_passes_passes_through_a_hatchway_endpoint(
    gateway_factory: Any, tmp_path: Path
) -> None:
    scored = _frozen_server_scenarios()
    assert len(scored) == 37, sorted(scored)
    with ServerThread(build_app(), host="127.0.0.1") as upstream:
        plugin = write_plugin(
            tmp_path,
            "everything",
            {"mcp_servers": [{"id": "everything", "url": f"{upstream.url}/mcp", "max_retries": 0}]},
        )
        gateway: RunningGateway = gateway_factory(
            allow_private_mcp_urls=True,
            mcp_endpoints=[
                {
                    "name": "everything",
                    "plugin": plugin,
                    "namespace": False,
                    "resources": True,
                    "prompts": True,
                }
            ],
        )
        direct_log = run_suite(f"{upstream.url}/mcp", tmp_path / "direct", "--requirements", "2026-07-28")
        direct = load_reports(tmp_path / "direct")
        with ServerThread(bearer_proxy(gateway.url, gateway.key), host="127.0.0.1") as proxy:
            # localhost, as the suite requires of the URL it is given (and as its checks send Host)
            url = f"http://localhost:{proxy.port}/mcp/everything"
            log = run_suite(url, tmp_path / "hatchway", "--requirements", "2026-07-28")
            through = load_reports(tmp_path / "hatchway")
            for name in sorted(n for n in scored if n in through and through[n].problems()):
                run_suite(url, tmp_path / "solo" / name, "--scenario", name, "--spec-version", "2026-07-28")
                again = load_reports(tmp_path / "solo" / name).get(name)  # once more alone (loaded machine)
                if again is not None:
                    through[name] = again
    baseline = {name for name in scored if name in direct and not direct[name].problems()}
    assert baseline == scored, f"the upstream itself fails {sorted(scored - baseline)}\n{direct_log[-3000:]}"
    REPORTS.extend(through[name] for name in sorted(scored) if name in through)
    missing = scored - through.keys()
    assert not missing, f"scenarios the suite did not run through Hatchway: {sorted(missing)}\n{log[-3000:]}"
    failing = {name: through[name].problems() for name in sorted(baseline) if through[name].problems()}
    assert not failing, "\n".join(f"{name}: {problems}" for name, problems in failing.items())
