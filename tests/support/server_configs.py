"""Plugin ``mcp_servers[]`` entries for tests of the credentials side, built from the real models.

``server(id, url, type=…, secret_ref=…, …)`` validates like a plugin file would; ``unchecked_server``
skips validation, for tests that the credentials refuse a malformed entry on their own;
``requester(org, seen)`` is whom the credentials work for, its secrets going to ``seen``.
"""

from __future__ import annotations

import time
from typing import Any

from hatchway.config.plugin import McpAuth, McpServerConfig
from hatchway.credentials import Requester
from hatchway.engine.context import RunContext
from hatchway.principal import Principal
from hatchway.redaction import Redactor


def server(server_id: str, url: str, **auth: Any) -> McpServerConfig:
    """A validated server entry with ``auth`` (no keywords: ``type: none``)."""
    return McpServerConfig(id=server_id, url=url, auth=McpAuth(**auth))


def unchecked_server(server_id: str, url: str | None, **auth: Any) -> McpServerConfig:
    """A server entry that skipped validation (what a future schema bug could let through)."""
    return McpServerConfig.model_construct(id=server_id, url=url, auth=McpAuth.model_construct(**auth))


def run_context(org_id: str, org_name: str = "org") -> RunContext:
    return RunContext(principal=Principal(org_id=org_id, org_name=org_name))


def requester(
    org_id: str, seen: Redactor | None = None, *, end_user: str | None = None, seconds: float = 120.0
) -> Requester:
    """A requester of ``org_id`` whose secrets go to ``seen`` (what a run would redact), with
    ``seconds`` before its deadline."""
    sink = seen.add if seen is not None else Redactor().add
    return Requester(org_id, end_user=end_user, add_secret=sink, deadline=time.monotonic() + seconds)
