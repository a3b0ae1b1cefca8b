"""Load an agent's ``tools.yaml`` + ``tool_policies.yaml`` (+ its plugin's server ids), check them
against each other, and resolve one policy per tool.

``inspect_agent_files`` reports every problem of every file (``hatchway agent check``);
``load_agent_tools`` raises the first file's ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hatchway.config.agents import (
    ApprovalRule,
    Execution,
    OperationType,
    PoliciesFile,
    PolicyDefaults,
    PreValidation,
    ToolDefinition,
    ToolPolicy,
    ToolsFile,
)
from hatchway.config.conditions import problem_of
from hatchway.config.loading import load_yaml_model
from hatchway.config.plugin import load_plugin
from hatchway.config.settings import AgentConfig, Settings
from hatchway.errors import ConfigError

PolicySource = Literal["tool_policies.yaml", "tools.yaml", "defaults"]


@dataclass(frozen=True, slots=True)
class ResolvedPolicy:
    """What governs one tool once the policy file, its defaults and tools.yaml are combined."""

    tool: str
    operation_type: OperationType
    require_confirmation: bool
    requires: tuple[str, ...] = ()
    pre_validation: PreValidation | None = None
    """Only when enabled."""
    execution: Execution | None = None
    source: PolicySource = "defaults"
    """Where the decision came from; recorded on every operation."""
    approvals: tuple[ApprovalRule, ...] = ()
    """Who approves before it executes, rule by rule (docs/operations.md, "Approvals")."""

    @property
    def is_operation(self) -> bool:
        """Whether calls become durable operations (transactional, or confirmation required)."""
        return self.operation_type is OperationType.TRANSACTIONAL or self.require_confirmation

    @property
    def governed(self) -> bool:
        """Whether anything beyond a plain MCP call applies (requires, validator, confirmation)."""
        return self.is_operation or bool(self.requires) or self.pre_validation is not None


@dataclass(slots=True)
class AgentFiles:
    """Where an agent's files are. Only ``tools`` is required."""

    tools: Path
    policies: Path | None = None
    plugin: Path | None = None
    label: str = ""


@dataclass(slots=True)
class AgentTools:
    """An agent's validated tool contracts and the policy of each."""

    tools: dict[str, ToolDefinition]
    policies: dict[str, ResolvedPolicy]
    files: AgentFiles
    plugin_servers: list[str] | None = None
    policy_file_present: bool = False

    def enabled(self) -> dict[str, ToolDefinition]:
        return {name: tool for name, tool in self.tools.items() if tool.enabled}

    def policy(self, name: str) -> ResolvedPolicy:
        return self.policies[name]


@dataclass(slots=True)
class _Problems:
    by_file: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def add(self, source: Path | str, path: str, message: str) -> None:
        self.by_file.setdefault(str(source), []).append((path, message))

    def add_error(self, error: ConfigError) -> None:
        self.by_file.setdefault(error.source, []).extend(error.problems)

    def errors(self) -> list[ConfigError]:
        return [ConfigError(source, problems) for source, problems in self.by_file.items()]


def agent_files_in(directory: Path) -> AgentFiles:
    """``DIR/tools.yaml`` plus ``tool_policies.yaml`` and ``plugin.yaml`` when present."""
    policies = directory / "tool_policies.yaml"
    plugin = directory / "plugin.yaml"
    return AgentFiles(
        tools=directory / "tools.yaml",
        policies=policies if policies.exists() else None,
        plugin=plugin if plugin.exists() else None,
        label=str(directory),
    )


def agent_files_of(agent: AgentConfig, settings: Settings) -> AgentFiles | None:
    """The files an ``agents:`` entry names, resolved against hatchway.yaml; None without ``tools``."""
    if not agent.tools:
        return None
    return AgentFiles(
        tools=settings.resolve_path(agent.tools),
        policies=settings.resolve_path(agent.tool_policies) if agent.tool_policies else None,
        plugin=settings.resolve_path(agent.plugin) if agent.plugin else None,
        label=f"agent {agent.name!r}",
    )


def inspect_agent_files(files: AgentFiles) -> tuple[AgentTools | None, list[ConfigError]]:
    """Validate every file and the references between them; all problems, one ConfigError per file."""
    problems = _Problems()
    tools = _load(ToolsFile, files.tools, problems)
    policies = _load(PoliciesFile, files.policies, problems) if files.policies else None
    servers = _plugin_server_ids(files.plugin, problems) if files.plugin else None
    if tools is not None:
        _check_servers(tools, servers, files.tools, problems)
        if policies is not None and files.policies is not None:
            _check_policies(tools, policies, files.policies, problems)
    if tools is None or problems.by_file:
        return None, problems.errors()
    resolved = {name: resolve_policy(name, tool, policies) for name, tool in tools.tools.items()}
    agent_tools = AgentTools(
        tools=dict(tools.tools),
        policies=resolved,
        files=files,
        plugin_servers=servers,
        policy_file_present=policies is not None,
    )
    return agent_tools, []


def load_agent_tools(files: AgentFiles) -> AgentTools:
    """The agent's tools, or the first file's ConfigError."""
    agent_tools, errors = inspect_agent_files(files)
    if errors:
        raise errors[0]
    assert agent_tools is not None
    return agent_tools


def resolve_policy(name: str, tool: ToolDefinition, policies: PoliciesFile | None) -> ResolvedPolicy:
    """One tool's policy: its entry in tool_policies.yaml, else tools.yaml's own fields, else defaults."""
    defaults = policies.defaults if policies is not None else PolicyDefaults()
    entry = policies.tool_policies.get(name) if policies is not None else None
    if entry is not None:
        return _from_policy(name, tool, entry, defaults)
    from_tool = tool.confirmation_required is not None or bool(tool.requires)
    confirm = tool.confirmation_required
    return ResolvedPolicy(
        tool=name,
        operation_type=OperationType.TRANSACTIONAL if confirm else defaults.operation_type,
        require_confirmation=defaults.require_confirmation if confirm is None else confirm,
        requires=tuple(tool.requires or ()),
        source="tools.yaml" if from_tool else "defaults",
    )


def _from_policy(
    name: str, tool: ToolDefinition, entry: ToolPolicy, defaults: PolicyDefaults
) -> ResolvedPolicy:
    validation = entry.pre_validation if entry.pre_validation and entry.pre_validation.enabled else None
    return ResolvedPolicy(
        tool=name,
        operation_type=entry.operation_type or defaults.operation_type,
        require_confirmation=(
            entry.require_confirmation
            if entry.require_confirmation is not None
            else defaults.require_confirmation
        ),
        requires=tuple(entry.requires or tool.requires or ()),
        pre_validation=validation,
        execution=entry.execution,
        source="tool_policies.yaml",
        approvals=tuple(entry.approvals),
    )


def _load(model: Any, path: Path, problems: _Problems) -> Any:
    try:
        return load_yaml_model(model, path)
    except ConfigError as exc:
        problems.add_error(exc)
        return None


def _plugin_server_ids(path: Path, problems: _Problems) -> list[str] | None:
    """The server ids of the agent's plugin, validated by the plugin models (as at start)."""
    try:
        plugin = load_plugin(path)
    except ConfigError as exc:
        problems.add_error(exc)
        return None  # a broken plugin would make every tool's mcp_server look wrong
    return [server.id for server in plugin.mcp_servers]


def _check_servers(tools: ToolsFile, servers: list[str] | None, source: Path, problems: _Problems) -> None:
    if servers is None:
        return
    for name, tool in tools.tools.items():
        if tool.mcp_server not in servers:
            known = ", ".join(servers) or "none"
            problems.add(
                source,
                f"tools.{name}.mcp_server",
                f"{tool.mcp_server!r} is not a server id of the agent's plugin (known: {known})",
            )


def _check_policies(tools: ToolsFile, policies: PoliciesFile, source: Path, problems: _Problems) -> None:
    for name, entry in policies.tool_policies.items():
        where = f"tool_policies.{name}"
        tool = tools.tools.get(name)
        if tool is None:
            known = ", ".join(tools.tools) or "none"
            problems.add(source, where, f"no tool named {name!r} in tools.yaml (known: {known})")
            continue
        for i, arg in enumerate(entry.requires):
            if arg not in tool.args_schema:
                problems.add(source, f"{where}.requires[{i}]", _not_an_argument(name, tool, arg))
        _check_approvals(name, tool, entry, policies.defaults, source, problems)
        validation = entry.pre_validation
        if validation is not None and validation.enabled and validation.tool == name:
            problems.add(
                source,
                f"{where}.pre_validation.tool",
                "the validator must be a separate tool without side effects, not the tool itself",
            )


def _check_approvals(
    name: str,
    tool: ToolDefinition,
    entry: ToolPolicy,
    defaults: PolicyDefaults,
    source: Path,
    problems: _Problems,
) -> None:
    """Each rule's condition compiles and runs over the tool's declared arguments; ``notify`` names
    arguments; only a transactional tool waits for approval."""
    if not entry.approvals:
        return
    where = f"tool_policies.{name}.approvals"
    operation_type = entry.operation_type or defaults.operation_type
    if operation_type is not OperationType.TRANSACTIONAL:
        problems.add(
            source,
            where,
            "only a transactional tool waits for approval: set operation_type: transactional",
        )
    types = {arg: spec.type for arg, spec in tool.args_schema.items()}
    for i, rule in enumerate(entry.approvals):
        if rule.when is not None and (problem := problem_of(rule.when, types)):
            problems.add(source, f"{where}[{i}].when", problem)
        for j, arg in enumerate(rule.notify):
            if arg not in tool.args_schema:
                problems.add(source, f"{where}[{i}].notify[{j}]", _not_an_argument(name, tool, arg))


def _not_an_argument(name: str, tool: ToolDefinition, arg: str) -> str:
    known = ", ".join(tool.args_schema) or "none declared"
    return f"{arg!r} is not an argument of tools.{name}.args_schema (known: {known})"
