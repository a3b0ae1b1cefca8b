"""MCP and OAuth credentials, beneath the engine: what a request to an MCP server authenticates with.

Nothing here knows of runs. Each entry point takes a ``Requester`` — the organisation whose vault
holds the secrets, the end user a per-user server is reached as, and a ``SecretSink`` that every
resolved secret goes to (the engine passes its run's ``add_secret``, which redacts them).

- ``vault_credentials.py``: ``VaultCredentials``, the engine's ``McpCredentials``: bearer, api_key
  and OAuth client_credentials from the vault, tokens cached sealed (``tokens.py``), the token
  exchange (``oauth.py``, ``assertion.py`` for ``private_key_jwt``), an inline plugin's token
  endpoint checked and pinned to the checked address (``egress.py``), and which hosts a secret may
  travel to (``scoping.py``);
- per-user OAuth (``grant: authorization_code``): the SDK's flow with the person's step delegated
  (``user_oauth.py``, ``consent.py``), the gateway's grants and consent links (``grants.py``) and
  their tables (``store.py``).
"""

from hatchway.credentials.requester import Requester, SecretSink
from hatchway.credentials.vault_credentials import VaultCredentials

__all__ = ["Requester", "SecretSink", "VaultCredentials"]
