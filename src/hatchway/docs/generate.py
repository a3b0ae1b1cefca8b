"""Every generated file of docs/, by path relative to the repository root."""

from __future__ import annotations

import json
from pathlib import Path

from hatchway.config.schema import SCHEMA_KINDS, json_schema
from hatchway.docs import configuration, error_catalogue

SCHEMA_DIR = "docs/schemas"


def schema_text(kind: str) -> str:
    """A schema file's content: stable key order and a final newline, so diffs stay small."""
    return json.dumps(json_schema(kind), indent=2, ensure_ascii=False) + "\n"


def generated_files() -> dict[str, str]:
    """Relative path → content of every generated file."""
    files = {f"{SCHEMA_DIR}/{spec.file_name}": schema_text(kind) for kind, spec in SCHEMA_KINDS.items()}
    files["docs/configuration.md"] = configuration.render()
    files["docs/errors.md"] = error_catalogue.render()
    return files


def stale_files(root: Path) -> list[str]:
    """The generated files under ``root`` that are missing or differ from what the code generates now."""
    stale = []
    for path, text in generated_files().items():
        target = root / path
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def write_files(root: Path) -> list[str]:
    """Write every generated file under ``root``; returns the paths that changed."""
    changed = stale_files(root)
    for path, text in generated_files().items():
        if path in changed:
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return changed
