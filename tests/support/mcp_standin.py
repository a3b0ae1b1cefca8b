"""A stand-in for a plugin's ``mcp_servers[]`` entry with exactly the attributes credentials read.

The real plugin models live with the MCP pool; ``VaultCredentials`` duck-types them, so tests of
the vault side use this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hatchway.engine.context import Principal, RunContext


@dataclass
class Auth:
    type: str = "none"
    secret_ref: str | None = None
    header: str = "X-Api-Key"
    token_url: str | None = None
    client_id: str | None = None
    scopes: list[str] = field(default_factory=list)


@dataclass
class Server:
    id: str
    url: str | None
    auth: Auth = field(default_factory=Auth)


def run_context(org_id: str, org_name: str = "org") -> RunContext:
    return RunContext(principal=Principal(org_id=org_id, org_name=org_name))
