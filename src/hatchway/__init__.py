"""Hatchway: a self-hosted, OpenAI-compatible agent gateway."""

from hatchway.api.app import create_app
from hatchway.config.agents import PoliciesFile, ToolsFile
from hatchway.config.plugin import McpServerConfig, PluginConfig, load_plugin
from hatchway.config.settings import Settings, load_settings
from hatchway.delegation import DelegationResult, DelegationSettings, adelegate, delegate
from hatchway.engine.tools.operations.classify import OperationVerdict, classify_results
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
    "DelegationResult",
    "DelegationSettings",
    "Gateway",
    "HatchwayError",
    "InvalidRequest",
    "McpServerConfig",
    "McpServerError",
    "ModelNotFound",
    "NotFound",
    "OperationVerdict",
    "PermissionDenied",
    "PluginConfig",
    "PoliciesFile",
    "ProviderError",
    "ProviderStatusError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "Settings",
    "ToolError",
    "ToolTimeout",
    "ToolsFile",
    "VaultError",
    "__version__",
    "adelegate",
    "classify_results",
    "create_app",
    "delegate",
    "load_plugin",
    "load_settings",
]
