"""The ``hatchway`` command line run as a user would: a real process per command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HATCHWAY = [sys.executable, "-m", "hatchway"]


def run(args: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``hatchway *args`` in ``cwd``: its exit code and captured output (text)."""
    return subprocess.run([*HATCHWAY, *args], cwd=cwd, capture_output=True, text=True, timeout=60, **kw)


def minimal_config(tmp_path: Path, **overrides: Any) -> Path:
    """A hatchway.yaml with a SQLite database and an upstream nobody serves, plus ``overrides``."""
    path = tmp_path / "hatchway.yaml"
    data = {
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'h.db'}",
        "providers": [{"id": "upstream", "base_url": "http://127.0.0.1:9/v1"}],
    } | overrides
    path.write_text(yaml.safe_dump(data))
    return path
