"""``hatchway agent check DIR|NAME`` run as a user would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.paths import EXAMPLE_AGENT, ROOT


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hatchway", "agent", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_good_directory_prints_ok_and_a_summary(tmp_path: Path) -> None:
    result = run(str(EXAMPLE_AGENT), cwd=tmp_path)
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
    shutil.copytree(EXAMPLE_AGENT, broken)
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


def test_the_plugin_is_validated_by_the_plugin_models(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(EXAMPLE_AGENT, broken)
    plugin = (broken / "plugin.yaml").read_text().replace("type: none", "type: bearer")
    (broken / "plugin.yaml").write_text(plugin.replace("timeout_ms: 15000", "timeout_ms: '15000'"))

    result = run(str(broken), cwd=tmp_path)

    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{broken / 'plugin.yaml'} is invalid" in result.stderr
    assert "mcp_servers[0].auth.secret_ref: required for auth type bearer" in result.stderr
    assert "mcp_servers[0].timeout_ms" in result.stderr


def _serve(tmp_path: Path, agent: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "hatchway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": f"sqlite+aiosqlite:///{tmp_path / 'h.db'}",
                "master_key_file": str(tmp_path / "master.key"),
                "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
                "agents": [{"name": "contas", "model": "up/m", **agent}],
            }
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "hatchway", "serve", "--config", str(config), "--port", "0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_broken_agent_files_stop_the_start_with_file_and_field_path(tmp_path: Path) -> None:
    broken = tmp_path / "contas"
    shutil.copytree(EXAMPLE_AGENT, broken)
    policies = (broken / "tool_policies.yaml").read_text().replace("requires: [items]", "requires: [itens]")
    (broken / "tool_policies.yaml").write_text(policies)
    files = {k: str(broken / f"{k}.yaml") for k in ("plugin", "tools", "tool_policies")}

    result = _serve(tmp_path, files)

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "tool_policies.yaml (from hatchway.yaml agents[0])" in result.stderr
    assert "tool_policies.cancelar_vas_lote.requires[0]: 'itens' is not an argument" in result.stderr


def test_an_agent_with_tools_needs_its_plugin(tmp_path: Path) -> None:
    result = _serve(tmp_path, {"tools": str(EXAMPLE_AGENT / "tools.yaml")})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "agents[0].plugin: required with tools" in result.stderr


def _approvals_agent(tmp_path: Path, approvals: list[dict[str, object]], **policy: object) -> Path:
    agent = tmp_path / "refunds"
    agent.mkdir()
    tools = {
        "tools": {"refund": {"mcp_server": "shop", "args_schema": {"amount": "number", "order": "string"}}}
    }
    entry = {"operation_type": "transactional", "approvals": approvals, **policy}
    (agent / "tools.yaml").write_text(yaml.safe_dump(tools))
    (agent / "tool_policies.yaml").write_text(yaml.safe_dump({"tool_policies": {"refund": entry}}))
    return agent


def test_approval_rules_are_summarised(tmp_path: Path) -> None:
    rules = [
        {
            "name": "over_500",
            "when": "arguments.amount > 500",
            "approvers": {"group": "supervisors"},
            "required": 2,
        },
        {"approvers": {"end_user": True}},
    ]
    result = run(str(_approvals_agent(tmp_path, rules)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "approval=over_500(group supervisors x2)" in result.stdout
    assert "approval=rule(the end user)" in result.stdout


def test_every_broken_approval_rule_is_named_with_its_field_path(tmp_path: Path) -> None:
    rules = [
        {"when": "arguments.amount >", "approvers": {"group": "s"}},
        {"when": "arguments.amont > 5", "approvers": {"group": "s"}},
        {"when": "refund_total > 5", "approvers": {"group": "s"}},
        {"when": "arguments.order > 5", "approvers": {"group": "s"}},
        {"when": "arguments.amount", "approvers": {"group": "s"}},
        {"approvers": {"group": "s"}, "notify": ["amount", "secret_field"]},
    ]
    result = run(str(_approvals_agent(tmp_path, rules)), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    where = "tool_policies.refund.approvals"
    assert f"{where}[0].when: not a valid CEL expression" in result.stderr
    assert (
        f"{where}[1].when: 'amont' is not an argument of the tool's args_schema (known: amount, order)"
        in (result.stderr)
    )
    assert f"{where}[2].when: Undefined variable or function: 'refund_total'" in result.stderr
    assert f"{where}[3].when: does not type-check over the declared arguments" in result.stderr
    assert f"{where}[4].when: must be true or false" in result.stderr
    assert (
        f"{where}[5].notify[1]: 'secret_field' is not an argument of tools.refund.args_schema"
        in result.stderr
    )


def test_an_approval_rule_that_cannot_hold_is_refused_by_the_model(tmp_path: Path) -> None:
    rules = [{"approvers": {"group": "s", "role": "admin"}, "on_timeout": "escalate"}]
    result = run(str(_approvals_agent(tmp_path, rules)), cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "give exactly one of group, role or end_user (got group, role)" in result.stderr
    read_only = tmp_path / "ro"
    read_only.mkdir()
    agent = _approvals_agent(read_only, [{"approvers": {"group": "s"}}], operation_type="read_only")
    refused = run(str(agent), cwd=tmp_path)
    assert "tool_policies.refund.approvals: only a transactional tool waits for approval" in refused.stderr
