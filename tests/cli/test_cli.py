"""The command line, run as a user would: a real process per command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.cli import HATCHWAY, minimal_config, run
from tests.support.paths import ROOT
from tests.support.servers import free_port, wait_until


def test_orgs_and_keys_create_print_only_the_key(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)
    created = run(["orgs", "create", "acme", "--config", str(config)], tmp_path)
    assert created.returncode == 0, created.stderr
    key = run(["keys", "create", "--org", "acme", "--config", str(config)], tmp_path)
    assert key.returncode == 0, key.stderr
    assert key.stdout.strip().startswith("hw-") and len(key.stdout.strip().splitlines()) == 1
    missing = run(["keys", "create", "--org", "ghost", "--config", str(config)], tmp_path)
    assert missing.returncode == 1 and "ghost" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("providers: [{id: up, base_url: 'ftp://x'}]\n", "providers[0].base_url"),
        ("providers: []\n", "providers"),
        (
            "providers: [{id: up, base_url: 'http://x/v1'}]\nmodels: [{name: m, provider: nope}]\n",
            "models[0].provider",
        ),
        ("providers: [{id: up, base_url: 'http://x/v1', colour: red}]\n", "providers[0].colour"),
        ("providers: [{id: up, base_url: 'http://x/v1'}\n", "not valid YAML"),
        ("database_url: x\n", "providers"),
    ],
)
def test_bad_config_fails_at_start_with_file_and_field_path(
    tmp_path: Path, content: str, expected: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    result = run(["serve", "--config", str(config), "--port", "0"], tmp_path)
    assert result.returncode == 2
    assert str(config) in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run(["serve", "--config", str(tmp_path / "nope.yaml")], tmp_path)
    assert result.returncode == 2 and "no such file" in result.stderr


def test_serve_with_the_example_config_answers_healthz(tmp_path: Path) -> None:
    """What `make run` does: serve examples/hatchway.yaml with state under ./.hatchway/."""
    port = free_port()
    proc = subprocess.Popen(
        [*HATCHWAY, "serve", "--config", str(ROOT / "examples" / "hatchway.yaml"), "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k != "HATCHWAY_UPSTREAM_API_KEY"},  # make run needs none
    )
    try:

        def healthy() -> bool:
            assert proc.poll() is None, "hatchway serve exited early"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, timeout=120, message="hatchway serve to answer /healthz")
        assert (tmp_path / ".hatchway" / "hatchway.db").exists()
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    # The migrations are applied (and said to be) before the server listens.
    assert (
        f"database ready: sqlite+aiosqlite:///./.hatchway/hatchway.db\nserving on http://127.0.0.1:{port}"
        in (output.decode())
    )
