"""docs/ is generated from the code (``python -m hatchway.docs``): these tests fail when it is stale,
when a code in the source has no documented meaning, or when the README's summary misses a status."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from hatchway.docs import error_catalogue
from hatchway.docs.error_codes import scan
from hatchway.docs.generate import generated_files, stale_files, write_files
from tests.support.paths import ROOT


def test_the_committed_docs_are_what_the_code_generates() -> None:
    stale = stale_files(ROOT)
    assert stale == [], f"regenerate with `python -m hatchway.docs` and commit: {stale}"


def test_check_mode_names_a_stale_file_and_write_mode_fixes_it(tmp_path: Path) -> None:
    write_files(tmp_path)
    (tmp_path / "docs" / "errors.md").write_text("# old\n", encoding="utf-8")
    check = [sys.executable, "-m", "hatchway.docs", "--check", "--root", str(tmp_path)]
    result = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "stale: docs/errors.md" in result.stderr
    subprocess.run([sys.executable, "-m", "hatchway.docs", "--root", str(tmp_path)], check=True, timeout=60)
    assert subprocess.run(check, capture_output=True, timeout=60).returncode == 0


def test_every_error_code_in_the_source_is_documented_and_no_documented_code_is_gone() -> None:
    found = {use.code for use in scan()}
    documented = set(error_catalogue.MEANINGS)
    assert found - documented == set(), "add a meaning to MEANINGS in src/hatchway/docs/error_catalogue.py"
    assert documented - found == set(), "these codes are no longer produced anywhere"
    errors_md = generated_files()["docs/errors.md"]
    assert all(f"`{code}`" in errors_md for code in found)


def test_the_scanner_sees_codes_however_they_are_passed() -> None:
    uses = {(u.code, u.kind, u.raiser) for u in scan()}
    assert ("operation_not_pending", "class", "OperationConflict") in uses  # a keyword, a class elsewhere
    assert ("model_not_found", "class", "ModelNotFound") in uses  # a class's default_code
    assert ("max_tool_calls_reached", "tool_result", "") in uses  # ToolResult.error("…")
    assert ("child_request_failed", "subagent", "") in uses  # a spawn_subagent failure
    assert ("rate_limit_exceeded", "response", "") in uses  # code = "…" if … else "…"
    assert ("mcp_auth", "class", "McpAuthError") in uses  # code=exc.code or "…"


def test_the_readme_summary_lists_every_http_status_and_type() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    summary = readme.split("## Errors", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", summary, re.MULTILINE))
    missing = error_catalogue.summary_pairs() - rows
    assert missing == set(), f"add these (status, type) rows to the README's error summary: {missing}"


def test_the_configuration_reference_documents_every_key() -> None:
    from hatchway.config.schema import SCHEMA_KINDS, models_in

    reference = generated_files()["docs/configuration.md"]
    for spec in SCHEMA_KINDS.values():
        for model in models_in(spec.model):
            for name, field in model.model_fields.items():
                assert f"| `{name}` |" in reference, f"{model.__name__}.{name}"
                assert field.description, f"{model.__name__}.{name} has no docstring"


def test_every_relative_link_of_the_readme_and_docs_points_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert broken == []
