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
import tempfile
from pathlib import Path

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
    if scenario == "auth/wif-jwt-bearer":
        # The workload's identity token, as a projected service account token would be handed over.
        return ["--client-id", str(context["client_id"]), "--assertion-stdin"], str(context["valid_jwt"])
    if scenario in ("auth/dpop", "auth/dpop-nonce"):
        options = [
            "--oauth-headless",
            "--client-metadata-url",
            CLIENT_METADATA_URL,
            "--dpop",
            "--call",
            "test-tool",
        ]
        return options, None
    if scenario.startswith("auth/"):
        options = ["--oauth-headless", "--client-metadata-url", CLIENT_METADATA_URL, "--call", "test-tool"]
        if context.get("client_id"):
            options += ["--client-id", str(context["client_id"])]
            if context.get("client_secret"):
                return [*options, "--client-secret-stdin"], str(context["client_secret"])
        return options, None
    return [], None  # initialize, json-schema-ref-no-deref, anything else: connect and list the tools


def enterprise_arguments(context: dict[str, object], id_token_file: Path) -> tuple[list[str], str]:
    """Enterprise-managed authorization: the user's ID token (in a file, as a sign-in would leave it)
    is exchanged at the IdP for an ID-JAG, which the confidential client presents."""
    id_token_file.write_text(str(context["idp_id_token"]), encoding="utf-8")
    options = [
        "--client-id",
        str(context["client_id"]),
        "--client-secret-stdin",
        "--idp-token-url",
        str(context["idp_token_endpoint"]),
        "--idp-client-id",
        str(context["idp_client_id"]),
        "--subject-token-file",
        str(id_token_file),
        "--call",
        "test-tool",
    ]
    return options, str(context["client_secret"])


def probe(url: str, options: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hatchway", "mcp", "probe", url, "--timeout", "20", *options]
    return subprocess.run(command, input=stdin, text=True, check=False, capture_output="--json" in options)


def echo_schema(url: str) -> int:
    """json-schema-2020-12-preservation: list the tools, then hand the focal tool's inputSchema, as
    the client holds it, back to the echo tool."""
    listing = probe(url, ["--json"])
    if listing.returncode != 0:
        sys.stderr.write(listing.stderr)
        return listing.returncode
    tools = {tool["name"]: tool for tool in json.loads(listing.stdout)["tools"]}
    schema = tools["json_schema_2020_12_tool"]["inputSchema"]
    return probe(url, ["--call", "json_schema_echo", "--args", json.dumps({"schema": schema})]).returncode


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if scenario == "json-schema-2020-12-preservation":
        return echo_schema(url)
    if scenario == "auth/enterprise-managed-authorization":
        with tempfile.TemporaryDirectory() as folder:
            options, stdin = enterprise_arguments(context, Path(folder) / "id_token.jwt")
            return probe(url, options, stdin).returncode
    options, stdin = probe_arguments(scenario, context)
    return probe(url, options, stdin).returncode


if __name__ == "__main__":
    sys.exit(main())
