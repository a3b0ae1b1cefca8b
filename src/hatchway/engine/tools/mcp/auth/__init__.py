"""MCP server authentication from the vault: bearer, api_key and OAuth client_credentials.

``VaultCredentials`` implements the pool's ``McpCredentials`` seam; ``token_url_problem`` is the
check plugin validation uses for ``auth.token_url`` (https only).
"""

from hatchway.engine.tools.mcp.auth.oauth import token_url_problem
from hatchway.engine.tools.mcp.auth.vault_credentials import VaultCredentials

__all__ = ["VaultCredentials", "token_url_problem"]
