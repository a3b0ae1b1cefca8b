"""How the MCP client gets the credentials of a server: the seam between the MCP pool and the vault.

The pool (agent-loop issue) calls these; the vault issue implements them (bearer, api_key, OAuth
client_credentials from secrets stored per organisation). ``server`` is the plugin's
``mcp_servers[]`` entry; ``trusted`` is True for plugins from hatchway.yaml, False for inline ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from hatchway.engine.context import RunContext

if TYPE_CHECKING:
    import httpx2


class McpCredentials(Protocol):
    async def authorize(self, server: Any, ctx: RunContext, *, trusted: bool) -> None:
        """Called when a run is planned: raise PermissionDenied (403) if this plugin may not use the
        secrets it names for this server's host, SecretNotFound if they do not exist."""

    async def auth_headers(self, server: Any, ctx: RunContext, *, trusted: bool) -> dict[str, str]:
        """Headers that authenticate one request to ``server``. Raises a ToolError when they cannot be
        obtained; never returns an empty dict for a server whose auth type needs credentials.
        Every secret value used is added to ``ctx.secret_values`` (for redaction)."""

    async def invalidate(
        self, server: Any, ctx: RunContext, *, refused: Mapping[str, str] | None = None
    ) -> None:
        """The server answered 401 to ``refused`` (the headers ``auth_headers`` gave that call):
        forget that cached token so the next call fetches a fresh one. A token other than the
        refused one (already replaced by a concurrent call) is kept, so N calls refused at once
        cause one new fetch, not N. Credential failures are never retried by the pool."""

    async def user_auth(self, server: Any, ctx: RunContext, *, trusted: bool) -> httpx2.Auth:
        """The flow that authenticates requests to a per-user OAuth server (``grant:
        authorization_code``) as the run's end user. Raises McpAuthError ``user_identity_required``
        when the run has no end user: never the organisation's or another user's token."""
