"""How the MCP client gets the credentials of a server: the seam between the MCP pool and the vault.

The pool calls these; ``hatchway.credentials.VaultCredentials`` implements them (bearer, api_key,
OAuth client_credentials from secrets stored per organisation, per-user OAuth). ``server`` is the
plugin's ``mcp_servers[]`` entry; ``trusted`` is True for plugins from hatchway.yaml, False for
inline ones; ``who`` is the run as the credentials see it (``requester_of``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from hatchway.credentials.requester import Requester
from hatchway.engine.context import RunContext

if TYPE_CHECKING:
    import httpx2


def requester_of(ctx: RunContext) -> Requester:
    """The run as its credentials see it: organisation, end user, redaction (every secret resolved
    for it is scrubbed from what it stores and returns) and deadline."""
    return Requester(ctx.org_id, end_user=ctx.on_behalf_of, add_secret=ctx.add_secret, deadline=ctx.deadline)


class McpCredentials(Protocol):
    async def authorize(self, server: Any, who: Requester, *, trusted: bool) -> None:
        """Called when a run is planned: raise PermissionDenied (403) if this plugin may not use the
        secrets it names for this server's host, SecretNotFound if they do not exist."""

    async def auth_headers(self, server: Any, who: Requester, *, trusted: bool) -> dict[str, str]:
        """Headers that authenticate one request to ``server``. Raises a ToolError when they cannot be
        obtained; never returns an empty dict for a server whose auth type needs credentials.
        Every secret value used goes to ``who.add_secret`` (for redaction)."""

    async def invalidate(
        self, server: Any, who: Requester, *, refused: Mapping[str, str] | None = None
    ) -> None:
        """The server answered 401 to ``refused`` (the headers ``auth_headers`` gave that call):
        forget that cached token so the next call fetches a fresh one. A token other than the
        refused one (already replaced by a concurrent call) is kept, so N calls refused at once
        cause one new fetch, not N. Credential failures are never retried by the pool."""

    async def user_auth(self, server: Any, who: Requester, *, trusted: bool) -> httpx2.Auth:
        """The flow that authenticates one call to a per-user OAuth server (``grant:
        authorization_code``) as the run's end user; the tokens it holds go to ``who.add_secret``.
        Raises McpAuthError ``user_identity_required`` when there is no end user: never the
        organisation's or another user's token."""

    async def grant_version(self, server: Any, who: Requester) -> str | None:
        """For a per-user server, which of the end user's grants is current (None: not connected).
        A result cached for that user is filed under it: once the connection is revoked (or made
        again) the results cached under the old one are never served."""
