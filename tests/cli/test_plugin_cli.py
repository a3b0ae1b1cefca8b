"""``hatchway plugin check`` and plugin files named in hatchway.yaml, run as real processes."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.cli import run

GOOD = """
version: "1"
mcp_servers:
  - id: pesquisa_web
    url: "https://mcp.example.com/search"
    auth: {type: bearer, secret_ref: "secret.mcp_search_api_key"}
    tools: [search_web, fetch_page]
    forward_headers: [x-tenant-id]
  - {id: local, command: python, args: [server.py]}
agent: {max_rounds: 6, tool_call_parallel: false}
"""

BAD = """
version: "1"
mcp_servers:
  - id: billing
    url: "https://mcp.example.com/billing"
    auth: {type: oauth, token_url: "http://idp.local/token", client_id: c, secret_ref: secret.s}
  - {id: billing, url: "https://x", forward_headers: ["x bad"], colour: red}
"""


def test_plugin_check_prints_ok_and_a_summary(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(GOOD)
    result = run(["plugin", "check", "p.yaml"], tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("ok: p.yaml")
    assert "pesquisa_web: streamable_http https://mcp.example.com/search" in out
    assert "auth bearer (secret.mcp_search_api_key)" in out and "tools search_web, fetch_page" in out
    assert "local: stdio python server.py" in out
    assert "max_rounds 6" in out and "tool_call_parallel false" in out


def test_plugin_check_lists_every_problem_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(BAD)
    result = run(["plugin", "check", "p.yaml"], tmp_path)
    assert result.returncode == 1
    err = result.stderr
    assert "mcp_servers[0].auth.token_url: must be https (got http://idp.local/token)" in err
    assert "mcp_servers[1].forward_headers[0]:" in err and "not a valid header name" in err
    assert "mcp_servers[1].colour: unknown key" in err
    assert "mcp_servers[1].id: duplicate server id 'billing'" in err
    assert "Traceback" not in err


def test_a_floopy_plugin_forwarding_credentials_is_accepted_with_a_warning(tmp_path: Path) -> None:
    """The seed: ``authorization`` and ``cookie`` are simply never forwarded. Such a plugin works
    unchanged; the check says which entries are dropped."""
    listed = "forward_headers: [x-tenant-id, Authorization, cookie]"
    plugin = GOOD.replace("forward_headers: [x-tenant-id]", listed)
    (tmp_path / "p.yaml").write_text(plugin)
    result = run(["plugin", "check", "p.yaml"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: p.yaml")
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert [w.split(" is dropped")[0] for w in warnings] == [
        "warning: mcp_servers[0].forward_headers: 'authorization'",
        "warning: mcp_servers[0].forward_headers: 'cookie'",
    ]


def test_plugin_check_of_a_missing_file(tmp_path: Path) -> None:
    result = run(["plugin", "check", "nope.yaml"], tmp_path)
    assert result.returncode == 1 and "nope.yaml" in result.stderr and "cannot read" in result.stderr


def test_a_broken_plugin_named_in_hatchway_yaml_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "research.yaml").write_text(BAD)
    config = tmp_path / "hatchway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": f"sqlite+aiosqlite:///{tmp_path / 'h.db'}",
                "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
                "routing_rules": [
                    {"name": "research", "match": {"model": "gpt-4o"}, "plugin": "plugins/research.yaml"}
                ],
            }
        )
    )
    result = run(["serve", "--config", str(config), "--port", "0"], tmp_path)
    assert result.returncode == 2
    assert "research.yaml" in result.stderr and "routing_rules[0].plugin" in result.stderr
    assert "mcp_servers[0].auth.token_url: must be https" in result.stderr
    assert "Traceback" not in result.stderr


def test_plugin_check_warns_that_the_sse_transport_is_deprecated(tmp_path: Path) -> None:
    plugin = (
        'version: "1"\nmcp_servers:\n  - id: legacy\n    url: https://mcp.example.com/sse\n'
        "    transport: sse\n"
    )
    (tmp_path / "p.yaml").write_text(plugin)
    result = run(["plugin", "check", "p.yaml"], tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert (
        len(warnings) == 1 and "mcp_servers[0].transport: sse" in warnings[0] and "deprecated" in warnings[0]
    )
    (tmp_path / "p.yaml").write_text(plugin.replace("    transport: sse\n", ""))
    assert "warning:" not in run(["plugin", "check", "p.yaml"], tmp_path).stderr
