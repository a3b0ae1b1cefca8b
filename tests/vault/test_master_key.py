"""The master key: made once with mode 0600, from the environment when set, refused when exposed."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from hatchway.errors import MasterKeyError
from hatchway.vault.master_key import ENV_VAR, load_master_key

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@posix_only
def test_the_key_file_is_made_on_first_start_with_mode_0600_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "state" / "master.key"

    first = load_master_key(path, env={})
    second = load_master_key(path, env={})

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.key == second.key and len(first.key) == 32
    assert base64.b64decode(path.read_text()) == first.key
    assert first.key.hex() not in repr(first) and "key=" not in repr(first)


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_key_file_readable_by_others_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "master.key"
    load_master_key(path, env={})
    path.chmod(mode)
    with pytest.raises(MasterKeyError, match=f"mode {mode:04o}.*chmod 600 {path}"):
        load_master_key(path, env={})


def test_the_environment_wins_over_the_file(tmp_path: Path) -> None:
    raw = os.urandom(32)
    key = load_master_key(tmp_path / "never-made.key", env={ENV_VAR: base64.b64encode(raw).decode()})
    assert key.key == raw and key.source == ENV_VAR
    assert not (tmp_path / "never-made.key").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!!", "not valid base64"),
        (base64.b64encode(b"short").decode(), r"must be 32 bytes of base64 \(got 5 bytes\)"),
    ],
)
def test_a_malformed_key_is_a_clear_error(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(MasterKeyError, match=message):
        load_master_key(tmp_path / "k", env={ENV_VAR: value})
    path = tmp_path / "file.key"
    path.write_text(value)
    path.chmod(0o600)
    with pytest.raises(MasterKeyError, match=f"{path}: .*{message}"):
        load_master_key(path, env={})
