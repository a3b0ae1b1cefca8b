"""The official MCP conformance suite's **server** mode: run it against a URL, read what it wrote.

``@modelcontextprotocol/conformance@0.2.0-alpha.12`` (npm alias ``conformance-2026``) writes one
``checks.json`` per scenario under the output directory, in a folder named
``server-<scenario>-<timestamp>``; ``load_reports`` keys them by scenario name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conformance.checks import ScenarioReport
from tests.support.node_tools import node_bin, node_env, package_file

SUITE = "@modelcontextprotocol/conformance-2026"  # npm alias of 0.2.0-alpha.12
_STAMP = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def run_suite(url: str, output: Path, *options: str) -> str:
    """Run ``conformance server --url URL OPTIONS -o OUTPUT``; returns its console output."""
    run = subprocess.run(
        [
            str(node_bin() / "node"),
            str(package_file(SUITE, "dist/index.js")),
            "server",
            "--url",
            url,
            *options,
            "-o",
            str(output),
        ],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return run.stdout + run.stderr


def load_reports(output: Path) -> dict[str, ScenarioReport]:
    """Every scenario report under ``output``, by scenario name."""
    found: dict[str, ScenarioReport] = {}
    for path in sorted(output.rglob("checks.json")):
        name = _STAMP.sub("", str(path.parent.relative_to(output))).removeprefix("server-")
        found[name] = ScenarioReport.load(name, path)
    return found
