"""``VaultCredentials``: the MCP pool's credentials, from the organisation's vault (McpCredentials).

``none`` sends nothing; ``bearer`` sends ``Authorization: Bearer <secret>``; ``api_key`` sends
``<header>: <secret>`` (``X-Api-Key`` by default); ``oauth`` performs client_credentials with the
client secret from the vault (or, for ``client_auth: private_key_jwt``, an assertion signed with the
vault's private key) and sends the access token as a bearer. ``grant: jwt_bearer`` presents a
workload's assertion instead, and ``grant: identity_assertion`` first exchanges a user's identity
token at the enterprise IdP for the ID-JAG it then presents (``token_sources.py`` reads both).
Secrets are always read from the vault of the organisation that runs the request, so another
organisation's secret of the same name is out of reach.
"""

from __future__ import annotations

import hashlib
import ssl
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from hatchway.config.token_endpoints import AUTH_METHODS, token_url_problem
from hatchway.credentials.egress import pin_public_address
from hatchway.credentials.oauth import (
    ID_JAG,
    JWT_BEARER,
    TOKEN_EXCHANGE,
    AccessToken,
    TokenEndpoint,
    TokenGrant,
)
from hatchway.credentials.requester import Requester
from hatchway.credentials.scoping import check_scope
from hatchway.credentials.token_sources import read_local, refuse_untrusted
from hatchway.credentials.tokens import Clock, ProcessSealer, TokenCache
from hatchway.errors import HatchwayError, InvalidRequest, McpAuthError, RequestError, VaultError
from hatchway.store.cache import Cache
from hatchway.vault.names import ref_problem
from hatchway.vault.store import Secret, Vault

if TYPE_CHECKING:  # imported on first use (see assertion.py for why)
    import httpx
    import httpx2

    from hatchway.credentials.user_oauth import UserOAuth

AUTH_TYPES = ("none", "bearer", "api_key", "oauth")
DEFAULT_API_KEY_HEADER = "X-Api-Key"


class UserGrants(Protocol):
    """Makes the per-user OAuth flow of one (organisation, end user, server)."""

    needs_end_user: bool
    """Whether a run without an end user is refused (the gateway); the probe acts as its operator."""

    async def flow(
        self, server: Any, who: Requester, *, client_secret: str | None, trusted: bool
    ) -> UserOAuth: ...


def per_user(server: Any) -> bool:
    return bool(getattr(getattr(server, "auth", None), "per_user", False))


def auth_type(server: Any) -> str:
    auth = getattr(server, "auth", None)
    return (getattr(auth, "type", None) or "none") if auth is not None else "none"


def header_safe(value: str, what: str) -> str:
    """``value`` if it can go in an HTTP header as-is; McpAuthError (without the value) otherwise."""
    if not value.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise McpAuthError(f"{what} cannot be sent in an HTTP header (control or non-ASCII characters)")
    return value


class SecretSource(Protocol):
    """Where credentials read secrets: the vault, or (``hatchway mcp probe``) values given to the CLI."""

    async def get(self, org_id: str, name: str) -> Secret: ...


class VaultCredentials:
    """Implements ``McpCredentials`` over a Vault and the shared Cache (for OAuth tokens)."""

    def __init__(
        self,
        vault: Vault | SecretSource,
        cache: Cache,
        *,
        clock: Clock = time.time,
        verify: ssl.SSLContext | bool | None = None,
        token_timeout: float = 10.0,
        allow_private_hosts: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        user_grants: UserGrants | None = None,
    ) -> None:
        self.vault = vault
        self.user_grants = user_grants
        """Where per-user OAuth servers (``grant: authorization_code``) get their flows; None: refused."""
        # Tokens in the shared cache are sealed with the organisation's vault data key.
        sealer = vault if isinstance(vault, Vault) else ProcessSealer()
        self.tokens = TokenCache(cache, sealer=sealer, clock=clock)
        self.endpoint = TokenEndpoint(
            verify=verify,
            timeout=token_timeout,
            transport=transport,
        )
        self.allow_private_hosts = allow_private_hosts
        """Like ``allow_private_mcp_urls``: inline plugins' token endpoints may be private addresses."""

    async def authorize(self, server: Any, who: Requester, *, trusted: bool) -> None:
        """At plan time: SecretNotFound (404) / PermissionDenied (403) before any tool is offered."""
        if auth_type(server) == "none":
            return
        if per_user(server):  # the user's own token comes later; a pre-registered client's secret now
            if server.auth.secret_ref is not None:
                secret = await self._secret(server, who)
                if not trusted:
                    check_scope(secret, server)
            return
        for field in token_source_fields(server):
            ref = getattr(server.auth, field)
            if not trusted:
                refuse_untrusted(ref, f"MCP server '{server.id}': auth.{field}")
            if ref.startswith("secret."):
                secret = await self._named(who, ref)
                if not trusted:
                    check_scope(secret, server)
        if client_secret_field(server) is None:
            return
        secret = await self._secret(server, who)
        if not trusted:
            check_scope(secret, server)

    async def auth_headers(self, server: Any, who: Requester, *, trusted: bool) -> dict[str, str]:
        """Headers for one request to ``server``; McpAuthError when they cannot be had."""
        kind = auth_type(server)
        if kind == "none" or per_user(server):  # per-user OAuth authenticates in ``user_auth``
            return {}
        secret = await self._client_secret(server, who, trusted=trusted)
        what = f"MCP server '{server.id}'"
        if kind in ("bearer", "api_key"):
            assert secret is not None  # secret_name() requires secret_ref for these
        if kind == "bearer":
            return {"Authorization": "Bearer " + header_safe(secret.value, f"secret '{secret.name}'")}
        if kind == "api_key":
            header = getattr(server.auth, "header", None) or DEFAULT_API_KEY_HEADER
            return {header: header_safe(secret.value, f"secret '{secret.name}'")}
        token = await self.tokens.get(
            token_key(server, who.org_id),
            lambda: self._fetch_token(server, secret, who, trusted=trusted),
            org_id=who.org_id,
        )
        who.add_secret(token)
        return {"Authorization": "Bearer " + header_safe(token, f"{what}: the access token")}

    async def _client_secret(self, server: Any, who: Requester, *, trusted: bool) -> Secret | None:
        """The client's secret or private key; None for a client that sends neither (``client_auth:
        none`` with ``grant: jwt_bearer``, where the assertion is the proof)."""
        if client_secret_field(server) is None:
            return None
        return await self._scoped_secret(server, who, trusted=trusted)

    async def invalidate(
        self, server: Any, who: Requester, *, refused: Mapping[str, str] | None = None
    ) -> None:
        """The server answered 401: drop the cached OAuth token so the retry fetches a new one.

        With ``refused`` (the headers the server turned down) only that token is dropped: calls
        refused together share one new token instead of each evicting the last one's.
        """
        if auth_type(server) != "oauth" or per_user(server):  # the user's flow handles its own 401s
            return
        bearer = _bearer_of(refused) if refused is not None else None
        await self.tokens.drop(token_key(server, who.org_id), bearer, org_id=who.org_id)

    async def user_auth(self, server: Any, who: Requester, *, trusted: bool) -> httpx2.Auth:
        """The end user's OAuth flow for ``server`` (``McpCredentials.user_auth``), for one call: the
        tokens it holds while serving the call go to ``who.add_secret``."""
        if self.user_grants is None:
            raise McpAuthError(
                f"MCP server '{server.id}': per-user OAuth is not available here", code="oauth_unavailable"
            )
        if who.end_user is None and self.user_grants.needs_end_user:
            raise McpAuthError(
                f"MCP server '{server.id}' acts as the end user: send X-On-Behalf-Of with the user's id "
                "(the organisation's own credentials are never used in the user's place)",
                code="user_identity_required",
            )
        client_secret = None
        if server.auth.secret_ref is not None:
            client_secret = (await self._scoped_secret(server, who, trusted=trusted)).value
        flow = await self.user_grants.flow(server, who, client_secret=client_secret, trusted=trusted)
        return flow.reporting_to(who.add_secret)

    async def grant_version(self, server: Any, who: Requester) -> str | None:
        """The current grant of ``who``'s end user for a per-user server (``McpCredentials``)."""
        if self.user_grants is None or who.end_user is None or not per_user(server):
            return None
        return await self.user_grants.grant_version(who.org_id, who.end_user, server)

    async def _scoped_secret(self, server: Any, who: Requester, *, trusted: bool) -> Secret:
        """The server's secret, checked against its allowed hosts for inline plugins; McpAuthError else."""
        try:
            secret = await self._secret(server, who)
            if not trusted:
                check_scope(secret, server)
        except (VaultError, RequestError) as exc:
            raise McpAuthError(f"MCP server '{server.id}': {exc.message}", code=exc.code) from None
        return secret

    async def _secret(self, server: Any, who: Requester) -> Secret:
        return await self._named(who, "secret." + secret_name(server))

    async def _named(self, who: Requester, ref: str) -> Secret:
        secret = await self.vault.get(who.org_id, ref.removeprefix("secret."))
        who.add_secret(secret.value)
        return secret

    async def _token_source(self, server: Any, who: Requester, field: str, *, trusted: bool) -> str:
        """The assertion or subject token ``auth.<field>`` names, read now; McpAuthError if it cannot be."""
        ref = getattr(server.auth, field)
        where = f"MCP server '{server.id}': auth.{field}"
        try:
            if not trusted:
                refuse_untrusted(ref, where)
            if ref.startswith("secret."):
                secret = await self._named(who, ref)
                if not trusted:
                    check_scope(secret, server)
                return secret.value
        except (VaultError, RequestError) as exc:
            raise McpAuthError(f"{where}: {exc.message}", code=exc.code) from None
        value = await read_local(ref, where)
        who.add_secret(value)
        return value

    async def _fetch_token(
        self, server: Any, secret: Secret | None, who: Requester, *, trusted: bool
    ) -> AccessToken:
        auth = server.auth
        grant = TokenGrant(
            token_url=auth.token_url,
            client_id=auth.client_id or "",
            client_secret=secret.value if secret is not None else "",
            scopes=tuple(getattr(auth, "scopes", None) or ()),
            auth_method=_auth_method(auth),  # type: ignore[arg-type]
            audience=getattr(auth, "audience", None),
            kid=getattr(auth, "kid", None),
        )
        grant_type = getattr(auth, "grant", "client_credentials")
        if grant_type == "jwt_bearer":
            assertion = await self._token_source(server, who, "assertion_ref", trusted=trusted)
            grant = replace(grant, grant_type=JWT_BEARER, assertion=assertion, audience=None)
        elif grant_type == "identity_assertion":
            id_jag = await self._identity_assertion(server, who, trusted=trusted)
            grant = replace(grant, grant_type=JWT_BEARER, assertion=id_jag.value, audience=None)
        return await self._exchange(server, grant, who, trusted=trusted, where="token_url")

    async def _identity_assertion(self, server: Any, who: Requester, *, trusted: bool) -> AccessToken:
        """The ID-JAG for ``server``: the user's identity token exchanged at the enterprise IdP
        (RFC 8693) for a grant whose audience is the server's authorization server."""
        auth = server.auth
        subject = await self._token_source(server, who, "subject_token_ref", trusted=trusted)
        exchange = TokenGrant(
            token_url=auth.idp_token_url,
            client_id=auth.idp_client_id or "",
            client_secret="",
            auth_method="none",
            grant_type=TOKEN_EXCHANGE,
            fields=(
                ("requested_token_type", ID_JAG),
                ("audience", auth.audience),
                ("resource", resource_of(server.url)),
                ("subject_token", subject),
                ("subject_token_type", f"urn:ietf:params:oauth:token-type:{auth.subject_token_type}"),
            ),
            issued_type=ID_JAG,
        )
        id_jag = await self._exchange(server, exchange, who, trusted=trusted, where="idp_token_url")
        who.add_secret(id_jag.value)
        return id_jag

    async def _exchange(
        self, server: Any, grant: TokenGrant, who: Requester, *, trusted: bool, where: str
    ) -> AccessToken:
        what = f"MCP server '{server.id}'"
        pin = None
        if not trusted and not self.allow_private_hosts:
            import httpx

            pin = await pin_public_address(httpx.URL(grant.token_url), what=f"{what}: {where}")
        # The exchange is part of the tool call: bounded by the server's timeout_ms, like the call.
        budget = getattr(server, "timeout_ms", 10_000) / 1000
        if (remaining := who.remaining()) is not None:
            budget = min(remaining, budget)
        try:
            return await self.endpoint.exchange(grant, what=what, budget=budget, pin=pin)
        except HatchwayError as exc:
            # The endpoint's own words are scrubbed of the request's credentials (``oauth.py``); the
            # caller scrubs every other secret it knows (the engine: ``PluginMcpClient``).
            raise McpAuthError(exc.message, code=exc.code) from None


def _bearer_of(headers: Mapping[str, str]) -> str | None:
    value = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    scheme, _, token = value.partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def _auth_method(auth: Any) -> str:
    # ``client_auth`` is the plugin's field; ``token_endpoint_auth_method`` (RFC 7591's name) is
    # read too so a configuration object spelling it that way keeps working.
    method = getattr(auth, "client_auth", None) or getattr(auth, "token_endpoint_auth_method", None)
    if method is None and _no_client_secret(auth):
        return "none"
    return method or AUTH_METHODS[0]


def _no_client_secret(auth: Any) -> bool:
    """A JWT bearer client that sends no secret of its own: the assertion authenticates it."""
    return (
        getattr(auth, "grant", None) == "jwt_bearer"
        and getattr(auth, "secret_ref", None) is None
        and getattr(auth, "private_key_ref", None) is None
    )


def _ref_field(auth: Any) -> str:
    """Which field names the vault secret: the private key for ``private_key_jwt``, else secret_ref."""
    if getattr(auth, "type", None) == "oauth" and _auth_method(auth) == "private_key_jwt":
        return "private_key_ref"
    return "secret_ref"


def client_secret_field(server: Any) -> str | None:
    """The auth field naming the client's own vault secret; None when the client has none."""
    auth = getattr(server, "auth", None)
    if auth_type(server) == "none" or (auth_type(server) == "oauth" and _auth_method(auth) == "none"):
        return None
    return _ref_field(auth)


def token_source_fields(server: Any) -> list[str]:
    """The auth fields naming an assertion or a subject token (``assertion_ref``, ``subject_token_ref``)."""
    auth = getattr(server, "auth", None)
    grant = getattr(auth, "grant", None) if auth_type(server) == "oauth" else None
    return {"jwt_bearer": ["assertion_ref"], "identity_assertion": ["subject_token_ref"]}.get(grant or "", [])


def resource_of(url: str) -> str:
    """The MCP server's resource identifier (RFC 8707): its URL without a fragment."""
    return url.split("#", 1)[0]


def secret_name(server: Any) -> str:
    """The vault name behind the server's ``auth.secret_ref``; InvalidRequest (400) for a bad auth block.

    Plugin validation (``config/plugin.py``, with the same ``ref_problem`` / ``token_url_problem``
    rules) catches these first; checking again keeps an entry that skipped validation from sending
    a secret anywhere.
    """
    kind, auth = auth_type(server), server.auth
    where = f"MCP server '{server.id}': auth"
    if kind not in AUTH_TYPES:
        raise InvalidRequest(f"{where}.type: unknown auth type '{kind}'")
    if not per_user(server) and client_secret_field(server) is None:
        raise InvalidRequest(f"{where}: this client sends no secret of its own")
    field = _ref_field(auth)
    ref = getattr(auth, field, None)
    if not ref or (problem := ref_problem(ref)):
        raise InvalidRequest(f"{where}.{field}: {problem if ref else f'required for auth type {kind!r}'}")
    if kind == "oauth" and not per_user(server):
        if problem := token_url_problem(getattr(auth, "token_url", None) or ""):
            raise InvalidRequest(f"{where}.token_url: {problem}")
        if not getattr(auth, "client_id", None):
            raise InvalidRequest(f"{where}.client_id: required for auth type 'oauth'")
        if _auth_method(auth) not in AUTH_METHODS:
            raise InvalidRequest(f"{where}.client_auth: one of {', '.join(AUTH_METHODS)}")
    return ref.removeprefix("secret.")


def token_key(server: Any, org_id: str) -> str:
    """Cache key of a server's token: the organisation plus everything that decides the token.

    Two plugins of one organisation may both call a server ``billing``; hashing the whole auth
    configuration keeps their tokens apart, so one plugin never receives a token minted for another.
    """
    auth = server.auth
    identity = [
        server.id,
        getattr(server, "url", None),
        auth.token_url,
        auth.client_id,
        sorted(getattr(auth, "scopes", None) or []),
        auth.secret_ref,
        _auth_method(auth),
        getattr(auth, "private_key_ref", None),
        getattr(auth, "kid", None),
        getattr(auth, "audience", None),
    ]
    if token_source_fields(server):  # appended, so the keys of client_credentials servers stay as they were
        identity += [
            auth.grant,
            getattr(auth, "assertion_ref", None),
            getattr(auth, "idp_token_url", None),
            getattr(auth, "idp_client_id", None),
            getattr(auth, "subject_token_ref", None),
            getattr(auth, "subject_token_type", None),
        ]
    digest = hashlib.sha256(orjson.dumps(identity)).hexdigest()[:32]
    return f"mcp-oauth:{org_id}:{digest}"
