"""tools.yaml and tool_policies.yaml: the models, the cross-checks, the resolved policies, the specs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hatchway.config.agent_files import AgentFiles, agent_files_in, inspect_agent_files, load_agent_tools
from hatchway.config.agents import OperationType
from hatchway.config.settings import load_settings
from hatchway.engine.tools.operations.specs import tool_specs
from hatchway.errors import ConfigError
from tests.support.paths import EXAMPLE_AGENT

TOOLS: dict[str, Any] = {
    "tools": {
        "cancelar": {
            "description": "Cancela VAS.",
            "mcp_server": "contas",
            "tool_type": "action",
            "args_schema": {"subject": {"type": "string", "label": "Produtos"}},
        },
        "consultar": {"description": "Consulta.", "mcp_server": "contas", "args_schema": {"ids": "array"}},
    }
}
POLICIES: dict[str, Any] = {
    "version": 1,
    "defaults": {"operation_type": "read_only", "require_confirmation": False},
    "tool_policies": {
        "cancelar": {
            "operation_type": "transactional",
            "require_confirmation": True,
            "requires": ["subject"],
            "pre_validation": {"enabled": True, "tool": "validar", "fail_open": False},
        }
    },
}
PLUGIN: dict[str, Any] = {"version": 1, "mcp_servers": [{"id": "contas", "url": "http://127.0.0.1:1/mcp"}]}


def _write(tmp_path: Path, tools: Any = TOOLS, policies: Any = POLICIES, plugin: Any = PLUGIN) -> AgentFiles:
    for name, data in (("tools.yaml", tools), ("tool_policies.yaml", policies), ("plugin.yaml", plugin)):
        if data is not None:
            (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return agent_files_in(tmp_path)


def _problems(files: AgentFiles) -> dict[str, list[tuple[str, str]]]:
    agent_tools, errors = inspect_agent_files(files)
    assert agent_tools is None and errors
    return {Path(e.source).name: e.problems for e in errors}


def _paths(files: AgentFiles) -> dict[str, list[str]]:
    return {name: [p for p, _ in problems] for name, problems in _problems(files).items()}


def test_the_example_agent_loads_with_its_policies() -> None:
    agent = load_agent_tools(agent_files_in(EXAMPLE_AGENT))
    assert agent.plugin_servers == ["contas"]
    cancel = agent.policy("cancelar_vas_avulso")
    assert cancel.operation_type is OperationType.TRANSACTIONAL and cancel.require_confirmation
    assert cancel.requires == ("subject",) and cancel.source == "tool_policies.yaml"
    assert cancel.pre_validation is not None and cancel.pre_validation.tool == "validar_vas_subject"
    assert cancel.pre_validation.fail_open is False
    assert agent.policy("cancelar_vas_fluxo").execution.workflow == "cancelamento_vas"  # type: ignore[union-attr]
    query = agent.policy("consultar_pedidos")
    assert query.operation_type is OperationType.READ_ONLY and not query.is_operation and query.governed


def test_aliases_type_and_requires_confirmation_are_accepted(tmp_path: Path) -> None:
    policies = {"tool_policies": {"cancelar": {"type": "transactional", "requires_confirmation": True}}}
    policy = load_agent_tools(_write(tmp_path, policies=policies)).policy("cancelar")
    assert policy.operation_type is OperationType.TRANSACTIONAL and policy.require_confirmation


def test_both_spellings_at_once_is_an_error(tmp_path: Path) -> None:
    policies = {"tool_policies": {"cancelar": {"type": "transactional", "operation_type": "read_only"}}}
    assert _paths(_write(tmp_path, policies=policies)) == {
        "tool_policies.yaml": ["tool_policies.cancelar.type"]
    }


@pytest.mark.parametrize(
    ("file", "mutate", "path"),
    [
        ("tools", lambda d: d["tools"]["cancelar"].update(multi_item=True), "tools.cancelar.multi_item"),
        ("tools", lambda d: d.update(fan_out="framework"), "fan_out"),
        (
            "tools",
            lambda d: d["tools"]["cancelar"]["args_schema"]["subject"].update(multi_item_strategy="partial"),
            "tools.cancelar.args_schema.subject.multi_item_strategy",
        ),
        (
            "tools",
            lambda d: d["tools"]["cancelar"]["args_schema"].update(fan_out={"type": "string"}),
            "tools.cancelar.args_schema.fan_out",
        ),
        (
            "policies",
            lambda d: d["tool_policies"]["cancelar"].update(multi_item_strategy="partial"),
            "tool_policies.cancelar.multi_item_strategy",
        ),
        (
            "policies",
            lambda d: d["tool_policies"]["cancelar"]["pre_validation"].update(fan_out="framework"),
            "tool_policies.cancelar.pre_validation.fan_out",
        ),
        ("policies", lambda d: d["defaults"].update(multi_item=True), "defaults.multi_item"),
    ],
)
def test_multi_item_keys_are_rejected_everywhere_with_the_reason(
    tmp_path: Path, file: str, mutate: Any, path: str
) -> None:
    import copy

    tools, policies = copy.deepcopy(TOOLS), copy.deepcopy(POLICIES)
    mutate(tools if file == "tools" else policies)
    problems = _problems(_write(tmp_path, tools=tools, policies=policies))
    name = "tools.yaml" if file == "tools" else "tool_policies.yaml"
    assert [p for p, _ in problems[name]] == [path]
    assert "multi-item needs no key" in problems[name][0][1]


def test_cross_checks_name_the_file_and_field(tmp_path: Path) -> None:
    tools = {"tools": {**TOOLS["tools"], "cancelar": {**TOOLS["tools"]["cancelar"], "mcp_server": "billing"}}}
    policies = {
        "tool_policies": {
            "cancelar": {"requires": ["subject", "msisdn"]},
            "ghost": {"operation_type": "transactional"},
        }
    }
    problems = _problems(_write(tmp_path, tools=tools, policies=policies))
    assert problems["tools.yaml"] == [
        ("tools.cancelar.mcp_server", "'billing' is not a server id of the agent's plugin (known: contas)")
    ]
    paths = dict(problems["tool_policies.yaml"])
    assert "'msisdn' is not an argument" in paths["tool_policies.cancelar.requires[1]"]
    assert "no tool named 'ghost'" in paths["tool_policies.ghost"]


def test_requires_in_tools_yaml_must_name_an_argument(tmp_path: Path) -> None:
    tools = {"tools": {"cancelar": {**TOOLS["tools"]["cancelar"], "requires": ["subjet"]}}}
    assert _paths(_write(tmp_path, tools=tools, policies=None)) == {
        "tools.yaml": ["tools.cancelar.requires[0]"]
    }


def test_pre_validation_needs_a_separate_tool_when_enabled(tmp_path: Path) -> None:
    missing = {"tool_policies": {"cancelar": {"pre_validation": {"enabled": True}}}}
    assert _paths(_write(tmp_path, policies=missing)) == {
        "tool_policies.yaml": ["tool_policies.cancelar.pre_validation.tool"]
    }
    itself = {"tool_policies": {"cancelar": {"pre_validation": {"tool": "cancelar"}}}}
    assert _paths(_write(tmp_path, policies=itself)) == {
        "tool_policies.yaml": ["tool_policies.cancelar.pre_validation.tool"]
    }
    disabled = {"tool_policies": {"cancelar": {"pre_validation": {"enabled": False}}}}
    assert load_agent_tools(_write(tmp_path, policies=disabled)).policy("cancelar").pre_validation is None


def test_the_plugin_is_checked_by_the_plugin_models(tmp_path: Path) -> None:
    # An empty server list is a valid plugin, so every tool's server is then unknown.
    assert _paths(_write(tmp_path, plugin={"version": 1})) == {
        "tools.yaml": ["tools.cancelar.mcp_server", "tools.consultar.mcp_server"]
    }
    broken = {"version": 1, "mcp_servers": [{"url": "x", "timeout_ms": "5"}]}
    assert _paths(_write(tmp_path, plugin=broken)) == {
        "plugin.yaml": ["mcp_servers[0].id", "mcp_servers[0].url", "mcp_servers[0].timeout_ms"]
    }
    unsafe = {
        "version": 1,
        "mcp_servers": [{"id": "contas", "url": "http://h/mcp", "forward_headers": ["bad name"]}],
    }
    assert _paths(_write(tmp_path, plugin=unsafe)) == {"plugin.yaml": ["mcp_servers[0].forward_headers[0]"]}
    (tmp_path / "plugin.yaml").unlink()
    assert load_agent_tools(agent_files_in(tmp_path)).plugin_servers is None  # no plugin: not checked


def test_every_file_reports_its_own_problems_in_one_pass(tmp_path: Path) -> None:
    tools = {"tools": {"cancelar": {**TOOLS["tools"]["cancelar"], "colour": "red", "tool_type": "write"}}}
    policies = {"tool_policies": {"cancelar": {"operation_type": "transactionl"}}}
    assert _paths(_write(tmp_path, tools=tools, policies=policies)) == {
        "tools.yaml": ["tools.cancelar.tool_type", "tools.cancelar.colour"],
        "tool_policies.yaml": ["tool_policies.cancelar.operation_type"],
    }
    (tmp_path / "tools.yaml").write_text("tools: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_agent_tools(agent_files_in(tmp_path))


def test_without_a_policy_file_tools_yaml_decides_and_says_so(tmp_path: Path) -> None:
    tools = {
        "tools": {
            "cancelar": {
                **TOOLS["tools"]["cancelar"],
                "confirmation_required": True,
                "requires": ["subject"],
            },
            "consultar": TOOLS["tools"]["consultar"],
        }
    }
    agent = load_agent_tools(_write(tmp_path, tools=tools, policies=None))
    cancel = agent.policy("cancelar")
    assert cancel.source == "tools.yaml" and cancel.require_confirmation and cancel.is_operation
    assert cancel.operation_type is OperationType.TRANSACTIONAL and cancel.requires == ("subject",)
    plain = agent.policy("consultar")
    assert plain.source == "defaults" and not plain.governed


def test_a_tool_without_a_policy_entry_falls_back_to_tools_yaml_and_the_file_defaults(tmp_path: Path) -> None:
    tools = {
        "tools": {
            **TOOLS["tools"],
            "consultar": {**TOOLS["tools"]["consultar"], "confirmation_required": False},
        }
    }
    policies = {"defaults": {"type": "transactional", "requires_confirmation": True}, "tool_policies": {}}
    agent = load_agent_tools(_write(tmp_path, tools=tools, policies=policies))
    assert agent.policy("cancelar").require_confirmation and agent.policy("cancelar").source == "defaults"
    assert agent.policy("consultar").require_confirmation is False
    assert agent.policy("consultar").source == "tools.yaml"


def test_tool_specs_are_what_the_model_sees(tmp_path: Path) -> None:
    tools = {"tools": {**TOOLS["tools"], "oculta": {**TOOLS["tools"]["consultar"], "enabled": False}}}
    specs = {s.name: s for s in tool_specs(load_agent_tools(_write(tmp_path, tools=tools)))}
    assert set(specs) == {"cancelar", "consultar"}
    cancel = specs["cancelar"]
    assert cancel.parameters == {
        "type": "object",
        "properties": {"subject": {"type": "string", "description": "Produtos"}},
        "required": ["subject"],
    }
    assert "confirm" in cancel.description
    assert specs["consultar"].parameters == {
        "type": "object",
        "properties": {"ids": {"type": "array", "items": {}}},
    }


def test_hatchway_yaml_takes_an_operations_block(tmp_path: Path) -> None:
    base = "providers: [{id: up, base_url: 'http://x/v1'}]\n"
    good = tmp_path / "good.yaml"
    good.write_text(base + "operations: {confirmation_ttl_seconds: 60, confirmation_words: {yes: [bora]}}\n")
    settings = load_settings(good)
    assert settings.operations.confirmation_ttl_seconds == 60
    assert settings.operations.confirmation_words.yes == ["bora"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(base + "operations: {confirmation_ttl_seconds: 0, ttl: 5}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(bad)
    assert [p for p, _ in info.value.problems] == ["operations.confirmation_ttl_seconds", "operations.ttl"]


def test_the_example_hatchway_yaml_declares_the_contas_agent() -> None:
    settings = load_settings(EXAMPLE_AGENT.parents[1] / "hatchway.yaml")
    agent = next(a for a in settings.agents if a.name == "contas")
    assert agent.name == "contas" and settings.resolve_path(agent.tools or "") == EXAMPLE_AGENT / "tools.yaml"
