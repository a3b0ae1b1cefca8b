"""Prints every conformance scenario's checks at the end of the run, passed or not."""

from __future__ import annotations

import pytest

from tests.conformance.checks import REPORTS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORTS:
        return
    terminalreporter.section(
        "MCP client conformance (@modelcontextprotocol/conformance 0.2.0-alpha.12 and 0.1.16)"
    )
    for report in REPORTS:
        terminalreporter.write_line(report.summary())
        for check in report.checks:
            if check.status != "INFO":  # INFO entries are the suite's request log, counted in the summary
                terminalreporter.write_line(f"    {check.status:<8} {check.id}: {check.description}")
