"""Hatchway: a self-hosted, OpenAI-compatible agent gateway.

The public names below are imported on first use (PEP 562), so ``import hatchway`` — and every
``hatchway`` CLI command — does not pay for the web stack, the MCP SDK and the OpenAI client
until it needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ERRORS = (
    "AuthenticationError",
    "ConfigError",
    "HatchwayError",
    "InvalidRequest",
    "McpServerError",
    "ModelNotFound",
    "NotFound",
    "PermissionDenied",
    "ProviderError",
    "ProviderStatusError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "ToolError",
    "ToolTimeout",
    "VaultError",
)
_WHERE: dict[str, str] = {
    "create_app": "hatchway.api.app",
    "PoliciesFile": "hatchway.config.agents",
    "ToolsFile": "hatchway.config.agents",
    "McpServerConfig": "hatchway.config.plugin",
    "PluginConfig": "hatchway.config.plugin",
    "load_plugin": "hatchway.config.plugin",
    "Settings": "hatchway.config.settings",
    "load_settings": "hatchway.config.settings",
    "DelegationResult": "hatchway.delegation",
    "DelegationSettings": "hatchway.delegation",
    "adelegate": "hatchway.delegation",
    "delegate": "hatchway.delegation",
    "OperationVerdict": "hatchway.engine.tools.operations.classify",
    "classify_results": "hatchway.engine.tools.operations.classify",
    "Gateway": "hatchway.gateway",
    **dict.fromkeys(_ERRORS, "hatchway.errors"),
}

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hatchway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
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
