"""Hatchway: a self-hosted, OpenAI-compatible agent gateway."""

from hatchway.api.app import create_app
from hatchway.config.plugin import McpServerConfig, PluginConfig, load_plugin
from hatchway.config.settings import Settings, load_settings
from hatchway.errors import (
    AuthenticationError,
    ConfigError,
    HatchwayError,
    InvalidRequest,
    McpServerError,
    ModelNotFound,
    NotFound,
    PermissionDenied,
    ProviderError,
    ProviderStatusError,
    ProviderTimeout,
    ProviderUnavailable,
    ToolError,
    ToolTimeout,
    VaultError,
)
from hatchway.gateway import Gateway

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "Gateway",
    "HatchwayError",
    "InvalidRequest",
    "McpServerConfig",
    "McpServerError",
    "ModelNotFound",
    "NotFound",
    "PermissionDenied",
    "PluginConfig",
    "ProviderError",
    "ProviderStatusError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "Settings",
    "ToolError",
    "ToolTimeout",
    "VaultError",
    "__version__",
    "create_app",
    "load_plugin",
    "load_settings",
]
