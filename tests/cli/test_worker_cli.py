"""``hatchway worker`` as an operator meets it: exit codes and messages when it cannot work.

Its working life (taking jobs, SIGTERM → 0, SIGKILL mid-run) is in tests/responses/test_worker_processes.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import minimal_config, run


def test_without_redis_the_worker_refuses_to_start_with_exit_2(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)

    result = run(["worker", "--config", str(config)], tmp_path)

    assert result.returncode == 2
    assert "redis_url is not set" in result.stderr and "Traceback" not in result.stderr


def test_with_redis_unreachable_the_worker_exits_1_and_says_why(tmp_path: Path) -> None:
    config = minimal_config(tmp_path, redis_url="redis://127.0.0.1:9/0")  # discard port: nothing listens

    result = run(["worker", "--config", str(config)], tmp_path)

    assert result.returncode == 1
    assert "cannot start" in result.stderr and "127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_broken_config_is_exit_2_with_the_field_path(tmp_path: Path) -> None:
    config = minimal_config(tmp_path, redis_url="redis://127.0.0.1:9/0", background={"worker_concurrency": 0})

    result = run(["worker", "--config", str(config)], tmp_path)

    assert result.returncode == 2 and "background.worker_concurrency" in result.stderr
