"""The client the MCP conformance suite drives: ``hatchway mcp probe`` against the scenario's server.

The suite runs ``<command> <server URL>`` with ``MCP_CONFORMANCE_SCENARIO`` naming the scenario and
``MCP_CONFORMANCE_CONTEXT`` (JSON) carrying its credentials. This maps each scenario to the probe
options a user would type, feeding secrets on stdin as the probe requires, and exits with the
probe's status. Only the standard library is imported here; the probe is the real CLI and does
all the work (discovery, authorization, headers, input rounds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# The suite's authorization servers approve at once; the scenario's own documents name this
# client metadata URL (it is never fetched by the suite's server).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def _calls(calls: list[tuple[str, object]]) -> list[str]:
    options: list[str] = []
    for name, arguments in calls:
        options += ["--call", name, "--args", json.dumps(arguments)]
    return options


def probe_arguments(scenario: str, context: dict[str, object]) -> tuple[list[str], str | None]:
    """(probe options, text for stdin) for one scenario."""
    if scenario in ("tools_call", "request-metadata", "http-standard-headers"):
        return _calls([("add_numbers", {"a": 5, "b": 3})]), None
    if scenario == "sse-retry":
        return ["--call", "test_reconnection"], None
    if scenario == "http-invalid-tool-headers":
        return _calls([("valid_tool", {"region": "us-west"})]), None
    if scenario == "http-custom-headers":
        calls = context.get("toolCalls") or []
        assert isinstance(calls, list)
        return _calls([(str(c["name"]), c.get("arguments") or {}) for c in calls]), None
    if scenario == "elicitation-sep1034-client-defaults":
        return ["--call", "test_client_elicitation_defaults", "--answer", "{}"], None
    if scenario == "sep-2322-client-request-state":
        names = [
            "test_mrtr_echo_state",
            "test_mrtr_unrelated",
            "test_mrtr_no_state",
            "test_mrtr_no_result_type",
        ]
        return [*_calls([(name, {}) for name in names]), "--answer", json.dumps({"confirmed": True})], None
    if scenario == "auth/client-credentials-basic":
        options = ["--client-id", str(context["client_id"]), "--client-secret-stdin", "--call", "test-tool"]
        return options, str(context["client_secret"])
    if scenario == "auth/client-credentials-jwt":
        options = ["--client-id", str(context["client_id"]), "--private-key-stdin", "--call", "test-tool"]
        return options, str(context["private_key_pem"])
    if scenario.startswith("auth/"):
        options = ["--oauth-headless", "--client-metadata-url", CLIENT_METADATA_URL, "--call", "test-tool"]
        if context.get("client_id"):
            options += ["--client-id", str(context["client_id"])]
            if context.get("client_secret"):
                return [*options, "--client-secret-stdin"], str(context["client_secret"])
        return options, None
    return [], None  # initialize, json-schema-ref-no-deref, anything else: connect and list the tools


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    options, stdin = probe_arguments(scenario, context)
    command = [sys.executable, "-m", "hatchway", "mcp", "probe", url, "--timeout", "20", *options]
    return subprocess.run(command, input=stdin, text=True, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
