"""The client the MCP conformance suite drives: ``hatchway mcp probe`` against the scenario's server.

The suite runs ``<command> <server URL>`` with ``MCP_CONFORMANCE_SCENARIO`` naming the scenario and
``MCP_CONFORMANCE_CONTEXT`` (JSON) carrying its credentials. This maps each required scenario to
the probe options a user would type, feeding secrets on stdin as the probe requires, and exits
with the probe's status. Only the standard library is imported here; the probe is the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def probe_arguments(scenario: str, context: dict[str, object]) -> tuple[list[str], str | None]:
    """(probe options, text for stdin) for one scenario."""
    if scenario == "tools_call":
        return ["--call", "add_numbers", "--args", json.dumps({"a": 5, "b": 3})], None
    if scenario == "sse-retry":
        return ["--call", "test_reconnection"], None
    if scenario == "auth/client-credentials-basic":
        options = ["--client-id", str(context["client_id"]), "--client-secret-stdin", "--call", "test-tool"]
        return options, str(context["client_secret"])
    if scenario == "auth/client-credentials-jwt":
        options = ["--client-id", str(context["client_id"]), "--private-key-stdin", "--call", "test-tool"]
        return options, str(context["private_key_pem"])
    return [], None  # initialize, and anything else: connect and list the tools


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    options, stdin = probe_arguments(scenario, context)
    command = [sys.executable, "-m", "hatchway", "mcp", "probe", url, "--timeout", "20", *options]
    return subprocess.run(command, input=stdin, text=True, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
