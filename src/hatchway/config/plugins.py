"""The plugin files hatchway.yaml names, parsed once at start: the one registry of configured plugins.

A routing rule's, an agent's and an MCP endpoint's plugin are read here and nowhere else at run time:
the loop binds them (``engine/tools/mcp/binding.py``), the MCP endpoints serve them
(``api/mcp_endpoints``), ``GET /v1/mcp/servers`` reports their servers. A file named twice is read
once; a broken one stops the start with the field that names it (``ConfigError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hatchway.config.plugin import McpServerConfig, PluginConfig, load_plugin
from hatchway.config.settings import RoutingRule, Settings
from hatchway.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ConfiguredServer:
    """One MCP server of a configured plugin, with where it is bound."""

    source: str
    """``rule:<name>`` or ``agent:<name>``."""
    server: McpServerConfig


class ConfiguredPlugins:
    """Every plugin of hatchway.yaml: its routing rules', its agents' and its MCP endpoints'."""

    def __init__(self, settings: Settings) -> None:
        self._files: dict[Path, PluginConfig] = {}
        self.rules: list[tuple[RoutingRule, PluginConfig]] = [
            (rule, self._load(settings, rule.plugin, f"routing_rules[{i}].plugin"))
            for i, rule in enumerate(settings.routing_rules)
        ]
        self.agents: dict[str, PluginConfig] = {
            agent.name: self._load(settings, agent.plugin, f"agents[{i}].plugin")
            for i, agent in enumerate(settings.agents)
            if agent.plugin
        }
        self.endpoints: dict[str, PluginConfig] = {}
        """Each MCP endpoint's plugin, by endpoint name (an agent's, or a file of its own)."""
        for i, endpoint in enumerate(settings.mcp_endpoints):
            if endpoint.plugin is not None:
                self.endpoints[endpoint.name] = self._load(
                    settings, endpoint.plugin, f"mcp_endpoints[{i}].plugin"
                )
            else:  # the settings checked that it names an agent with a plugin
                self.endpoints[endpoint.name] = self.agents[endpoint.agent or ""]

    def _load(self, settings: Settings, name: str, field: str) -> PluginConfig:
        path = settings.resolve_path(name)
        if path not in self._files:
            try:
                self._files[path] = load_plugin(path)
            except ConfigError as exc:
                raise ConfigError(f"{path} (from hatchway.yaml {field})", exc.problems) from None
        return self._files[path]

    @property
    def any(self) -> bool:
        """Whether hatchway.yaml names any plugin file."""
        return bool(self._files)

    def servers(self) -> list[ConfiguredServer]:
        """Every server of every routing rule's and agent's plugin, with where it is bound."""
        found = [
            ConfiguredServer(f"rule:{rule.name}", s)
            for rule, plugin in self.rules
            for s in plugin.mcp_servers
        ]
        found += [
            ConfiguredServer(f"agent:{name}", s)
            for name, plugin in self.agents.items()
            for s in plugin.mcp_servers
        ]
        return found

    def server_ids(self) -> set[str]:
        """The id of every server of every configured plugin, MCP endpoints' included."""
        return {s.id for plugin in self._files.values() for s in plugin.mcp_servers}
