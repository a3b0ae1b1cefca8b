"""``hatchway mcp probe``, run as a real process against real MCP servers (SDK-built, on loopback)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.support.cli import HATCHWAY
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_servers import McpTestServer, stdio_command
from tests.support.servers import free_port

Factory = Callable[..., McpTestServer]


def probe(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HATCHWAY, "mcp", "probe", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


def test_it_shows_the_server_its_protocol_and_its_tools_then_calls_one(
    mcp_server_factory: Factory, tmp_path: Path
) -> None:
    server = mcp_server_factory("inventory")

    result = probe(server.url, "--call", "add", "--args", '{"a": 2, "b": 40}', cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    first, *rest = result.stdout.splitlines()
    assert first.startswith("inventory") and "protocol 20" in first
    table = "\n".join(rest)
    for tool in ("echo", "add", "slow", "fail"):
        assert f"│ {tool} " in table
    assert "Add two integers." in table and "a*, b*" in table  # required arguments are starred
    assert "call add: ok" in result.stdout and result.stdout.rstrip().endswith("42")
    assert [r.arguments for r in server.requests if r.tool == "add"] == [{"a": 2, "b": 40}]


def test_the_legacy_sse_transport_and_stdio_servers_work_too(
    mcp_server_factory: Factory, tmp_path: Path
) -> None:
    sse = mcp_server_factory("legacy", transport="sse")
    command, args = stdio_command()

    over_sse = probe(sse.url, "--sse", "--call", "echo", "--args", '{"text": "hi"}', cwd=tmp_path)
    over_stdio = probe("--command", command, *(f"--arg={a}" for a in args), "--call", "echo",
                       "--args", '{"text": "yo"}', cwd=tmp_path)  # fmt: skip

    assert over_sse.returncode == 0, over_sse.stderr
    assert over_sse.stdout.rstrip().endswith("echo:hi")
    assert over_stdio.returncode == 0, over_stdio.stderr
    assert "echo" in over_stdio.stdout and over_stdio.stdout.rstrip().endswith("yo")


def test_a_tool_error_result_is_printed_and_exits_1(mcp_server_factory: Factory, tmp_path: Path) -> None:
    server = mcp_server_factory()

    result = probe(server.url, "--call", "fail", "--args", '{"message": "stock is locked"}', cwd=tmp_path)

    assert result.returncode == 1
    assert "call fail: error" in result.stdout and "stock is locked" in result.stdout


def test_a_bearer_token_comes_from_an_env_var_or_stdin_never_argv(
    mcp_server_factory: Factory, tmp_path: Path, secret_scanner: SecretScanner
) -> None:
    token = "tok-" + os.urandom(8).hex()
    secret_scanner.watch(token)
    server = mcp_server_factory("guarded", required_bearer=token)

    from_env = probe(server.url, "--bearer-env", "PROBE_TOKEN", cwd=tmp_path, env={"PROBE_TOKEN": token})
    from_stdin = probe(server.url, "--bearer-stdin", cwd=tmp_path, stdin=token + "\n")
    wrong = probe(server.url, "--bearer-stdin", cwd=tmp_path, stdin="not-the-token")
    missing = probe(server.url, cwd=tmp_path)

    assert from_env.returncode == 0, from_env.stderr
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert {r.headers.get("authorization") for r in server.requests if r.status is None} == {
        f"Bearer {token}"
    }
    for refused in (wrong, missing):
        assert refused.returncode == 3, refused.stderr
        assert "rejected the credentials (HTTP 401)" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1  # one line, no traceback
    for result in (from_env, from_stdin, wrong, missing):
        secret_scanner.observe("probe output", result.stdout + result.stderr)


def test_refusals_exit_non_zero_with_one_line_saying_why(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/mcp"  # a port nobody listens on

    cases = {
        "unreachable": (
            probe(closed, "--timeout", "5", cwd=tmp_path),
            4,
            f"{closed}: cannot reach the server",
        ),
        "bad url": (probe("ftp://example.com/mcp", cwd=tmp_path), 2, "url: must be an http(s) URL"),
        "no target": (probe(cwd=tmp_path), 2, "give the server's URL"),
        "bad args": (probe(closed, "--call", "x", "--args", "[1]", cwd=tmp_path), 2, "must be a JSON object"),
        "bad json": (probe(closed, "--call", "x", "--args", "{", cwd=tmp_path), 2, "not valid JSON"),
        "two stdins": (
            probe(closed, "--bearer-stdin", "--client-secret-stdin", cwd=tmp_path, stdin="x"),
            2,
            "only one secret can be read from stdin",
        ),
        "unset env": (probe(closed, "--bearer-env", "NO_SUCH_VAR_X", cwd=tmp_path), 2, "NO_SUCH_VAR_X"),
    }
    for name, (result, code, reason) in cases.items():
        assert result.returncode == code, (name, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("error: ") and reason in lines[-1], (name, result.stderr)
        assert "Traceback" not in result.stderr, name


def test_a_server_from_a_plugin_file_uses_the_organisations_vault(
    mcp_server_factory: Factory, tmp_path: Path, secret_scanner: SecretScanner
) -> None:
    token = "vault-" + os.urandom(8).hex()
    secret_scanner.watch(token)
    server = mcp_server_factory("billing", required_bearer=token)
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'h.db'}"
    secret_scanner.watch_database(db_url)
    config = tmp_path / "hatchway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": db_url,
                "master_key_file": str(tmp_path / "master.key"),
                "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
            }
        )
    )
    plugin = tmp_path / "billing.yaml"
    plugin.write_text(
        yaml.safe_dump(
            {
                "version": "1",
                "mcp_servers": [
                    {"id": "other", "url": "https://other.example.com/mcp"},
                    {
                        "id": "billing",
                        "url": server.url,
                        "auth": {"type": "bearer", "secret_ref": "secret.billing"},
                    },
                ],
            }
        )
    )

    def hatchway(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*HATCHWAY, *args, "--config", str(config)],
            cwd=tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
        )
        secret_scanner.observe(" ".join(args[:3]), done.stdout + done.stderr)
        return done

    assert hatchway("orgs", "create", "acme").returncode == 0
    missing = hatchway("mcp", "probe", "--plugin", str(plugin), "--server", "billing", "--org", "acme")
    assert hatchway("secrets", "set", "billing", "--org", "acme", stdin=token).returncode == 0
    found = hatchway("mcp", "probe", "--plugin", str(plugin), "--server", "billing", "--org", "acme")
    no_org = hatchway("mcp", "probe", "--plugin", str(plugin), "--server", "billing")
    no_id = hatchway("mcp", "probe", "--plugin", str(plugin), "--org", "acme")

    assert missing.returncode == 3 and "billing" in missing.stderr, missing.stderr
    assert found.returncode == 0, found.stderr
    assert found.stdout.startswith("billing")
    assert no_org.returncode == 2 and "--org" in no_org.stderr
    assert no_id.returncode == 2 and "servers: other, billing" in no_id.stderr
