"""``hatchway agent check DIR|NAME`` run as a user would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agents" / "contas"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hatchway", "agent", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_good_directory_prints_ok_and_a_summary(tmp_path: Path) -> None:
    result = run(str(EXAMPLE), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok:")
    line = next(li for li in result.stdout.splitlines() if li.strip().startswith("cancelar_vas_avulso"))
    assert "transactional" in line and "confirmation=yes" in line and "requires=subject" in line
    assert "pre_validation=validar_vas_subject(fail_open=false)" in line


def test_an_agent_name_from_hatchway_yaml(tmp_path: Path) -> None:
    result = run("contas", "--config", str(ROOT / "examples" / "hatchway.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agent 'contas'" in result.stdout and "consultar_pedidos" in result.stdout
    unknown = run("ghost", "--config", str(ROOT / "examples" / "hatchway.yaml"), cwd=tmp_path)
    assert unknown.returncode == 1 and "ghost" in unknown.stderr and "contas" in unknown.stderr


def test_a_broken_directory_lists_every_problem_with_file_and_path(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(EXAMPLE, broken)
    tools = (broken / "tools.yaml").read_text().replace("mcp_server: contas", "mcp_server: billing", 1)
    (broken / "tools.yaml").write_text(tools)
    policies = (broken / "tool_policies.yaml").read_text()
    policies = policies.replace("requires: [items]", "requires: [itens]").replace(
        "  consultar_pedidos:\n", "  consultar_pedidos:\n    multi_item: true\n"
    )
    (broken / "tool_policies.yaml").write_text(policies)

    result = run(str(broken), cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"{broken / 'tools.yaml'} is invalid" in result.stderr
    assert "tools.cancelar_vas_avulso.mcp_server: 'billing' is not a server id" in result.stderr
    assert f"{broken / 'tool_policies.yaml'} is invalid" in result.stderr
    assert "tool_policies.consultar_pedidos.multi_item: not a Hatchway key: multi-item needs no key" in (
        result.stderr
    )


def test_a_directory_without_tools_yaml(tmp_path: Path) -> None:
    result = run(str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1 and "no tools.yaml" in result.stderr
