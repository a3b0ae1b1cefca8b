"""Every CLI path a broken file or an unreachable database takes prints the file, the field and the
fix, with exit code 2 (configuration) or 1 (a runtime failure) — never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import minimal_config, run
from tests.support.servers import free_port

PLUGINS = {
    "not UTF-8": (b'version: "1"\nagent: \xff\xfe\n', "not UTF-8 text at byte 21 (0xff)"),
    "flow nested 1,000 deep": (b'version: "1"\nagent: ' + b"[" * 1000 + b"]" * 1000, "nested too deeply"),
    "blocks nested 1,000 deep": (
        b'version: "1"\n' + b"".join(b" " * i + b"a:\n" for i in range(1000)),
        "nested too deeply",
    ),
    "an integer of 5,000 digits": (b'version: "1"\nagent:\n  max_rounds: ' + b"9" * 5000, "5000 digits"),
}


def assert_clean_failure(result, code: int, *expected: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    flat = " ".join(output.split())  # Rich wraps long lines
    for text in expected:
        assert text in flat, output


@pytest.mark.parametrize("kind", PLUGINS)
def test_plugin_check_on_a_broken_file(tmp_path: Path, kind: str) -> None:
    content, expected = PLUGINS[kind]
    (tmp_path / "p.yaml").write_bytes(content)
    assert_clean_failure(run(["plugin", "check", "p.yaml"], tmp_path), 1, "p.yaml", expected)


def test_serve_on_a_hatchway_yaml_that_is_not_utf8(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)
    config.write_bytes(config.read_bytes() + b"redis_prefix: \xff\n")
    assert_clean_failure(run(["serve", "--config", str(config)], tmp_path), 2, "not UTF-8 text")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("database_url", "not a url", "database_url: not a database URL"),
        ("database_url", "mysql://root@127.0.0.1/db", "the driver 'mysql' is not supported"),
        ("redis_url", "127.0.0.1:6379", "redis_url: must start with redis://"),
    ],
)
def test_serve_on_a_url_it_cannot_use(tmp_path: Path, field: str, value: str, expected: str) -> None:
    config = minimal_config(tmp_path, **{field: value})
    assert_clean_failure(run(["serve", "--config", str(config)], tmp_path), 2, expected)


def test_serve_when_postgresql_refuses_connections(tmp_path: Path) -> None:
    refused = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/test"  # nothing listens there
    config = minimal_config(tmp_path, database_url=refused, master_key_file=str(tmp_path / "mk"))
    result = run(["serve", "--config", str(config), "--port", str(free_port())], tmp_path)
    assert_clean_failure(result, 1, "the database could not be reached", "Connect call failed")
