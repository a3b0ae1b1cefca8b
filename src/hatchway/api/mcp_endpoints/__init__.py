"""Hatchway as an MCP server: each ``mcp_endpoints`` entry served at ``/mcp/{name}``.

One MCP SDK ``Server`` per endpoint, over the SDK's streamable HTTP session manager (2026-07-28
stateless requests and 2025-11-25 sessions alike). A request is authenticated with a Hatchway API
key as bearer (what Claude Code's and Cursor's ``headers`` send) before the SDK sees it; the
endpoint's ``organisations`` bound who may use it. Its tools are the plugin's servers' tools,
namespaced as in the loop (``<server>__<tool>``), in a deterministic order, and a call goes through
the gateway's own MCP client: the pool, the vault's credentials (never the MCP client's: no token
passthrough), per-user OAuth for ``X-On-Behalf-Of``, retries, redaction.

What an endpoint serves, and how, is the MCP server service's (``hatchway/mcp_server``: the endpoint,
its operations, the relay of input requests, the passthrough of resources and prompts). This package
is the ASGI side: authentication (a key, or an OAuth access token: ``oauth.py``), the DNS-rebinding
checks (``Host``/``Origin``, by the SDK's transport security against
``mcp_allowed_hosts``/``mcp_allowed_origins``), routing a request to its endpoint by name, and the
protected resource metadata route. It builds each endpoint here, given its collaborators
(``EndpointDeps``), never the ``Gateway``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import INTERNAL_ERROR
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from hatchway.access.gatekeeper import refuse_repeated_identity
from hatchway.access.roles import check_endpoint
from hatchway.api.auth import bearer_token, source_of
from hatchway.api.errors import error_response
from hatchway.api.mcp_endpoints.oauth import METADATA_PREFIX, ResourceServer, TokenRejected
from hatchway.config.settings import Settings
from hatchway.engine.context import RunContext
from hatchway.errors import HatchwayError, NotFound, PermissionDenied
from hatchway.mcp_server.endpoint import (
    ARRIVED,
    END_USER,
    PRINCIPAL,
    SESSION_IDLE_SECONDS,
    Endpoint,
    EndpointDeps,
)
from hatchway.mcp_server.operations import EndpointOperations
from hatchway.principal import Principal
from hatchway.store.orgs import KEY_PREFIX

if TYPE_CHECKING:
    from hatchway.gateway import Gateway

__all__ = ["PREFIX", "Endpoint", "McpEndpoints"]
logger = logging.getLogger(__name__)
PREFIX = "/mcp/"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MAX_SESSIONS_PER_ORG = 100
"""2025-11-25 sessions one organisation may hold open on one endpoint (of its ``MAX_SESSIONS``)."""


MCP_METHODS = ("GET", "POST", "DELETE")
"""Streamable HTTP's methods: the stream, the messages, the session's end."""


class McpEndpoints:
    """Every endpoint of hatchway.yaml, as one ASGI app for the paths under ``/mcp/``."""

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings
        self.orgs = gateway.orgs
        self.access = gateway.access
        """Who a key or an OAuth token's organisation is."""
        self.endpoints: dict[str, Endpoint] = {}
        self.resource_servers: dict[str, ResourceServer] = {}
        """The endpoints in OAuth resource-server mode: what validates their access tokens."""
        self.quota = SessionQuota()
        self.rebinding = TransportSecurityMiddleware(transport_security(settings))
        services = gateway.planner.operations.services
        # requestState sealed by one replica opens on every other: a key of the master key's.
        state_key = hashlib.sha256(b"hatchway-mcp-request-state\0" + gateway.vault.master_key.key).digest()
        transport = transport_security(settings)
        deps = EndpointDeps(
            pool=gateway.mcp_pool,
            credentials=gateway.mcp_credentials,
            pinning=gateway.tool_pinning,
            cache=gateway.cache,
            scopes=gateway.scopes,
            known_secrets=gateway.models.secrets,
            deadline_seconds=settings.loop_deadline_seconds,
            tasks=gateway.mcp_tasks,
            task_settings=settings.mcp_tasks,
        )
        for config in settings.mcp_endpoints:
            plugin = gateway.plugins.endpoints[config.name]
            service = services.get(config.agent) if config.agent is not None else None
            operations = EndpointOperations(service, confirm_tool=config.confirm_tool) if service else None
            if config.oauth is not None:
                self.resource_servers[config.name] = ResourceServer(
                    config.name,
                    config.oauth,
                    base_url=settings.public_base_url,
                    secret=gateway.vault.system_secret,
                )
            self.endpoints[config.name] = Endpoint(
                config, plugin, deps, operations=operations, state_key=state_key, transport=transport
            )

    async def serve(self) -> None:
        """Run every endpoint's session manager until the gateway stops (a task of the gateway's)."""
        async with contextlib.AsyncExitStack() as stack:
            for endpoint in self.endpoints.values():
                await stack.enter_async_context(endpoint.sessions.run())
            await _forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = time.monotonic()
        if scope["path"].startswith(METADATA_PREFIX):
            await self._metadata(scope, receive, send)
            return
        # DNS rebinding first, before any credential is looked at (the SDK checks again).
        refused = await self.rebinding.validate_request(Request(scope), is_post=scope["method"] == "POST")
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["method"] not in MCP_METHODS:
            # Before the key is looked at: a method no route takes is the caller's mistake, not a
            # role's refusal (each of which the audit trail would record).
            raise StarletteHTTPException(405, "Method Not Allowed", headers={"allow": ", ".join(MCP_METHODS)})
        name = scope["path"][len(PREFIX) :].strip("/")
        endpoint = self.endpoints.get(name)
        try:
            # Then: no credential, no telling which names exist (an OAuth endpoint's metadata is public).
            principal, end_user = await self._authenticate(scope, endpoint)
            if endpoint is None:
                raise NotFound(f"no MCP endpoint '{name}'")
            if not endpoint.allows(principal):
                raise PermissionDenied(f"this organisation or key may not use the MCP endpoint '{name}'")
        except HatchwayError as exc:
            response = error_response(exc)
            if exc.status_code == 401:
                resource = self.resource_servers.get(name)
                invalid = "invalid_token" if isinstance(exc, TokenRejected) else None
                challenge = 'Bearer realm="hatchway"'
                if resource is not None:
                    challenge = resource.challenge(invalid)
                response.headers["www-authenticate"] = challenge
            if isinstance(exc, TokenRejected):
                logger.info("MCP endpoint %s: token refused (%s)", name, exc.reason)
            await response(scope, receive, send)
            return
        scope = {
            **scope,
            "state": {**scope.get("state", {}), PRINCIPAL: principal, END_USER: end_user, ARRIVED: arrived},
            # The SDK binds a 2025-11-25 session to the credential that opened it.
            "user": _session_owner(principal, end_user),
        }
        await self._serve(endpoint, principal.org_id, scope, receive, send)

    async def _serve(
        self, endpoint: Endpoint, org_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Hand the request to the endpoint's SDK session manager, its sessions counted per organisation."""
        headers = _headers(scope)
        session_id = headers.get("mcp-session-id")
        name = endpoint.config.name
        opens = (
            scope["method"] == "POST"
            and session_id is None
            and headers.get("mcp-protocol-version") not in MODERN_PROTOCOL_VERSIONS
        )
        if opens and self.quota.full(name, org_id):
            body = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": INTERNAL_ERROR, "message": "Too many open sessions for this organisation"},
            }
            await JSONResponse(body, status_code=429, headers={"retry-after": "60"})(scope, receive, send)
            return
        if opens:  # the response names the session it opened
            send = self.quota.opening(name, org_id, send)
        elif session_id is not None and scope["method"] == "DELETE":  # freed only once the SDK ended it
            send = self.quota.closing(name, session_id, send, also=endpoint.listeners.forget)
        elif session_id is not None:
            self.quota.seen(name, session_id)
            endpoint.listeners.seen(session_id)
        await endpoint.sessions.handle_request(scope, receive, send)

    async def _authenticate(self, scope: Scope, endpoint: Endpoint | None) -> tuple[Principal, str | None]:
        """The principal and the end user: a Hatchway key (``X-On-Behalf-Of`` names the end user), or
        on an OAuth endpoint an access token (its subject is the end user)."""
        refuse_repeated_identity(scope["headers"])
        headers = _headers(scope)
        token = bearer_token(headers.get("authorization", ""))
        resource = self.resource_servers.get(endpoint.config.name) if endpoint is not None else None
        if resource is None or token is None or token.startswith(KEY_PREFIX):
            principal = await self.access.admit(
                token, headers, scope["method"], "/mcp/{name}", source=source_of(scope)
            )
            if endpoint is not None:
                check_endpoint(principal, endpoint.config.name)
            # A bad X-On-Behalf-Of is the request's 400 now, not an error inside the MCP exchange.
            ctx = RunContext.from_headers(principal, headers, deadline_seconds=0)
            return principal, ctx.on_behalf_of
        found = await resource.validate(token)
        assert endpoint is not None and endpoint.config.oauth is not None
        org = await self.orgs.get_org(endpoint.config.oauth.organisation)
        return Principal(
            org_id=org.id, org_name=org.name, key_name=f"oauth:{endpoint.config.name}"
        ), found.subject

    async def _metadata(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /.well-known/oauth-protected-resource/mcp/<name>`` of an OAuth endpoint."""
        name = scope["path"][len(METADATA_PREFIX) + len(PREFIX) :].strip("/")
        resource = self.resource_servers.get(name)
        if resource is None or scope["method"] not in ("GET", "HEAD"):
            await error_response(NotFound(f"no OAuth-protected MCP endpoint '{name}'"))(scope, receive, send)
            return
        response = JSONResponse(resource.metadata(), headers={"cache-control": "public, max-age=300"})
        await response(scope, receive, send)

    async def close(self) -> None:
        for endpoint in self.endpoints.values():
            await endpoint.listeners.close()
        for resource in self.resource_servers.values():
            await resource.close()


class SessionQuota:
    """2025-11-25 sessions per organisation on each endpoint, so one tenant cannot take the
    endpoint's ``MAX_SESSIONS`` from the others: a new session past ``per_org`` is 429.

    Counted from the ``Mcp-Session-Id`` the SDK's responses carry, forgotten on ``DELETE`` or after
    the SDK's own idle timeout without a request (the SDK does not report a session's end)."""

    def __init__(self, per_org: int | None = None, idle_seconds: float = SESSION_IDLE_SECONDS) -> None:
        self.per_org = per_org or MAX_SESSIONS_PER_ORG
        self.idle_seconds = idle_seconds
        self._sessions: dict[tuple[str, str], tuple[str, float]] = {}
        """(endpoint, session id) → (organisation, last request)."""

    def full(self, endpoint: str, org_id: str) -> bool:
        self._expire()
        return (
            sum(1 for (e, _), (o, _) in self._sessions.items() if e == endpoint and o == org_id)
            >= self.per_org
        )

    def seen(self, endpoint: str, session_id: str) -> None:
        key = (endpoint, session_id)
        if key in self._sessions:
            self._sessions[key] = (self._sessions[key][0], time.monotonic())

    def opening(self, endpoint: str, org_id: str, send: Send) -> Send:
        """``send``, noting the session its response opens."""

        async def noted(message: Any) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self._sessions.setdefault(
                            (endpoint, value.decode("latin-1")), (org_id, time.monotonic())
                        )
            await send(message)

        return noted

    def closing(self, endpoint: str, session_id: str, send: Send, *, also: Callable[[str], None]) -> Send:
        """``send``, forgetting the session when the SDK answers its ``DELETE`` with success (a refused
        one — another key's, a rebinding attempt — leaves it counted)."""

        async def noted(message: Any) -> None:
            if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
                self._sessions.pop((endpoint, session_id), None)
                also(session_id)
            await send(message)

        return noted

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_seconds
        for key in [k for k, (_, last) in self._sessions.items() if last < cutoff]:
            del self._sessions[key]


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """DNS rebinding protection: the hosts and origins the endpoints answer (421 / 403 otherwise)."""
    hosts = [f"{host}:*" for host in LOOPBACK_HOSTS] + list(LOOPBACK_HOSTS)
    origins = [f"http://{host}:*" for host in LOOPBACK_HOSTS] + [f"http://{host}" for host in LOOPBACK_HOSTS]
    if settings.public_base_url:
        public = urlsplit(settings.public_base_url)
        hosts.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *settings.mcp_allowed_hosts],
        allowed_origins=[*origins, *settings.mcp_allowed_origins],
    )


def _session_owner(principal: Principal, end_user: str | None) -> Any:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    # A key's sessions are the key's; an OAuth token's are its subject's.
    subject = principal.key_id or f"oauth:{end_user}"
    return AuthenticatedUser(AccessToken(token="", client_id=principal.org_id, scopes=[], subject=subject))


async def _forever() -> None:
    await asyncio.Event().wait()
