"""Configuration files as pydantic models: hatchway.yaml, plugins, agents."""

from hatchway.config.loading import load_yaml_model, validation_problems
from hatchway.config.plugin import McpAuth, McpServerConfig, PluginAgentConfig, PluginConfig, load_plugin
from hatchway.config.settings import (
    AgentConfig,
    ModelConfig,
    ProviderConfig,
    RoutingRule,
    Settings,
    SubagentSettings,
    load_settings,
)

__all__ = [
    "AgentConfig",
    "McpAuth",
    "McpServerConfig",
    "ModelConfig",
    "PluginAgentConfig",
    "PluginConfig",
    "ProviderConfig",
    "RoutingRule",
    "Settings",
    "SubagentSettings",
    "load_plugin",
    "load_settings",
    "load_yaml_model",
    "validation_problems",
]
