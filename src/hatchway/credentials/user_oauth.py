"""Per-user OAuth toward MCP servers: the authorization-code grant with PKCE, acting as the end user.

The MCP SDK's ``OAuthClientProvider`` implements the client side of MCP authorization as the
specification and its conformance suite freeze it: protected resource metadata (RFC 9728, path and
root variants), authorization server metadata (RFC 8414 / OpenID) with its issuer checked, resource
indicators (RFC 8707) and refusal of a mismatched resource, client registration in the
specification's order (pre-registered, Client ID Metadata Document, dynamic registration), the
token endpoint's authentication methods, scope selection and step-up, ``offline_access``, refresh,
and RFC 9207 ``iss`` validation. Hatchway uses it rather than a copy of its own.

What the SDK leaves to its caller is the one step that needs a person: sending them to the
authorization endpoint and waiting for the redirect. ``UserOAuth`` replaces that step with a
``Consent`` strategy (``consent.py``), so one code path serves three situations:

- ``HeadlessConsent`` (``hatchway mcp probe --oauth-headless``): follows the authorization
  endpoint's redirect itself, for test authorization servers that approve at once;
- ``LoopbackConsent`` (``hatchway mcp probe --oauth``): prints the link (or opens a browser) and
  waits for the redirect on a loopback port;
- the gateway's conversation consent (``grants.ConversationConsent``): no person is waiting on the request,
  so it records the pending authorization and raises ``AuthorizationPending``; the loop turns that
  into a link for the end user, and the callback route completes the grant later.

With ``dpop`` (``auth.dpop: true``) the flow also does what the SDK does not: DPoP (RFC 9449,
``dpop.py``). Its token requests carry a proof, a token the server issues as ``DPoP`` is sent as
``Authorization: DPoP <token>`` with a fresh proof per request, a ``use_dpop_nonce`` challenge is
answered once with the server's nonce, and the key is kept (sealed) with the grant it proves.
"""

from __future__ import annotations

import contextlib
import logging
import secrets as _secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode, urljoin

import httpx2
import orjson
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.client.auth.oauth2 import PKCEParameters
from mcp.client.auth.utils import validate_authorization_response_iss
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl

from hatchway.credentials.consent import AuthorizationPending, AuthorizationRequest, Consent
from hatchway.credentials.dpop import MAX_NONCE_RETRIES, DpopKey
from hatchway.credentials.requester import SecretSink

logger = logging.getLogger(__name__)


class _PendingIsNotAnError(logging.Filter):
    """The SDK logs every exception of its flow with a traceback; a user who has not authorized yet
    is the normal first step of the conversation consent, not an error worth one."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, AuthorizationPending)


REFRESH_EARLY_SECONDS = 60.0
"""A token is refreshed this long before it expires, so a call never carries one that lapses in flight."""


@dataclass(slots=True)
class StoredGrant:
    """What one end user's authorization of one server leaves behind, so that any replica, at any
    later time, can use and refresh the token without discovering everything again."""

    tokens: OAuthToken | None = None
    expires_at: float | None = None
    """Wall-clock expiry of the access token (``expires_in`` is relative to when it was issued)."""
    oauth_metadata: OAuthMetadata | None = None
    protected_resource: ProtectedResourceMetadata | None = None
    auth_server_url: str | None = None
    token_scheme: str = "Bearer"
    """How the access token is presented: ``Bearer``, or ``DPoP`` when the server bound it to ``dpop_key``."""
    dpop_key: str | None = None
    """The PEM of the DPoP key the tokens are bound to (``auth.dpop``); sealed with the rest."""

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens.model_dump(mode="json", exclude_none=True) if self.tokens else None,
            "expires_at": self.expires_at,
            "oauth_metadata": _dump(self.oauth_metadata),
            "protected_resource": _dump(self.protected_resource),
            "auth_server_url": self.auth_server_url,
            "token_scheme": self.token_scheme,
            "dpop_key": self.dpop_key,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredGrant:
        def load(model: Any, value: Any) -> Any:
            return model.model_validate(value) if value else None

        return cls(
            tokens=load(OAuthToken, data.get("tokens")),
            expires_at=data.get("expires_at"),
            oauth_metadata=load(OAuthMetadata, data.get("oauth_metadata")),
            protected_resource=load(ProtectedResourceMetadata, data.get("protected_resource")),
            auth_server_url=data.get("auth_server_url"),
            token_scheme=str(data.get("token_scheme") or "Bearer"),
            dpop_key=data.get("dpop_key"),
        )


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", exclude_none=True, by_alias=True) if model is not None else None


class GrantStore(Protocol):
    """Where one (organisation, end user, server)'s grant and one (organisation, server)'s client live."""

    async def load_grant(self) -> StoredGrant | None: ...

    async def save_grant(self, grant: StoredGrant) -> None: ...

    async def load_client(self) -> OAuthClientInformationFull | None: ...

    async def save_client(self, client: OAuthClientInformationFull) -> None: ...


class MemoryGrants:
    """A ``GrantStore`` that lives as long as the object (the probe's default)."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.grant: StoredGrant | None = None
        self.client = client

    async def load_grant(self) -> StoredGrant | None:
        return self.grant

    async def save_grant(self, grant: StoredGrant) -> None:
        self.grant = grant

    async def load_client(self) -> OAuthClientInformationFull | None:
        return self.client

    async def save_client(self, client: OAuthClientInformationFull) -> None:
        self.client = client


class _Storage(TokenStorage):
    """The SDK's ``TokenStorage`` over a ``GrantStore``; tokens are saved with what refreshing them needs."""

    def __init__(self, store: GrantStore) -> None:
        self.store = store
        self.provider: UserOAuth | None = None

    async def get_tokens(self) -> OAuthToken | None:
        grant = await self.store.load_grant()
        return grant.tokens if grant is not None else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        assert self.provider is not None
        context = self.provider.context
        expires_at = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        await self.store.save_grant(
            StoredGrant(
                tokens=tokens,
                expires_at=expires_at,
                oauth_metadata=context.oauth_metadata,
                protected_resource=context.protected_resource_metadata,
                auth_server_url=context.auth_server_url,
                token_scheme=self.provider.token_scheme,
                dpop_key=self.provider.dpop.to_pem() if self.provider.dpop is not None else None,
            )
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self.store.load_client()

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.store.save_client(client_info)


def client_metadata(
    redirect_uri: str, *, client_name: str = "Hatchway", auth_method: str | None = None
) -> OAuthClientMetadata:
    """The metadata Hatchway registers (dynamically, or in its Client ID Metadata Document)."""
    fields: dict[str, Any] = {
        "client_name": client_name,
        "redirect_uris": [AnyUrl(redirect_uri)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    if auth_method is not None:
        fields["token_endpoint_auth_method"] = auth_method
    return OAuthClientMetadata(**fields)


def pre_registered(
    client_id: str, client_secret: str | None, redirect_uri: str, auth_method: str | None = None
) -> OAuthClientInformationFull:
    """A client registered with the authorization server beforehand (``auth.client_id``/``secret_ref``)."""
    method = auth_method or ("client_secret_basic" if client_secret else "none")
    return OAuthClientInformationFull(
        client_id=client_id,
        client_secret=client_secret,
        redirect_uris=[AnyUrl(redirect_uri)],
        token_endpoint_auth_method=method,  # type: ignore[arg-type]
    )


class UserOAuth(OAuthClientProvider):
    """The SDK's OAuth client for one end user and one server, with the person's step delegated.

    One instance serves the calls of one (organisation, end user, server) for as long as the caller
    keeps it; a new one picks up the stored grant (tokens, expiry and the metadata refreshing them
    needs), so any replica can refresh a token another one obtained.
    """

    def __init__(
        self,
        server_url: str,
        *,
        redirect_uri: str,
        store: GrantStore,
        consent: Consent,
        scopes: list[str] | None = None,
        client_metadata_url: str | None = None,
        auth_method: str | None = None,
        refresh_lock: Callable[[], AbstractAsyncContextManager[None]] | None = None,
        always_ask: bool = False,
        dpop: bool = False,
    ) -> None:
        storage = _Storage(store)
        super().__init__(
            server_url,
            client_metadata(redirect_uri, auth_method=auth_method),
            storage=storage,
            redirect_handler=_unused_redirect,
            callback_handler=_unused_callback,
            client_metadata_url=client_metadata_url,
        )
        storage.provider = self
        self.store = store
        self.consent = consent
        self.configured_scopes = list(scopes or [])
        self.refresh_lock = refresh_lock
        """A lock shared by the replicas (the gateway's cache): a flow that will refresh holds it."""
        self.always_ask = always_ask
        """Send ``prompt=consent``: the person sees what they grant even to a client approved before
        (a consent link forwarded to someone else must not connect their account silently)."""
        self.dpop: DpopKey | None = DpopKey() if dpop else None
        """The key this client proves its tokens with (RFC 9449); replaced by the stored grant's."""
        self.token_scheme = "Bearer"

    def reporting_to(self, sink: SecretSink) -> httpx2.Auth:
        """This flow for one call: the tokens it holds while it serves the call go to ``sink`` (the
        caller redacts them everywhere it writes). The flow may be shared by concurrent calls of one
        user; each call's view reports to that call's sink."""
        return _ReportingFlow(self, sink)

    async def async_auth_flow(self, request: httpx2.Request):  # type: ignore[no-untyped-def,override]
        """The SDK's flow, holding ``refresh_lock`` when the stored token is about to be refreshed.

        A refresh token is often single use (rotated): two replicas refreshing it at once would make
        one of them fail, and that user be asked to authorize again. Under the lock the second one
        waits, then reloads the grant the first one stored.
        """
        async with contextlib.AsyncExitStack() as stack:
            if self.refresh_lock is not None and await self._will_refresh():
                await stack.enter_async_context(self.refresh_lock())
                self._initialized = False  # reload: the holder before us may have refreshed it
            flow = super().async_auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    response = yield outgoing
                    retries = 0  # every answer's nonce is kept; a bounded number asks to resend
                    while await self._nonce_requested(outgoing, response) and retries < MAX_NONCE_RETRIES:
                        retries += 1
                        self._sign(outgoing)  # a new proof, with the nonce the server just gave
                        response = yield outgoing
                    outgoing = await flow.asend(response)
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()

    async def _nonce_requested(self, request: httpx2.Request, response: httpx2.Response) -> bool:
        """Whether the server asked for ``request`` again with its DPoP nonce (which is then kept)."""
        if self.dpop is None or "DPoP" not in request.headers:
            return False
        if response.status_code == 400 and response.headers.get("DPoP-Nonce"):
            await response.aread()  # the token endpoint says why in its JSON error
        return self.dpop.learn_nonce(request, response)

    def _sign(self, request: httpx2.Request) -> None:
        assert self.dpop is not None
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        self.dpop.sign(request, access_token=token if scheme == "DPoP" else None)

    def _add_auth_header(self, request: httpx2.Request) -> None:
        """``Authorization: DPoP <token>`` and a fresh proof for a DPoP-bound token; else the SDK's."""
        tokens = self.context.current_tokens
        if self.dpop is None or self.token_scheme != "DPoP" or tokens is None or not tokens.access_token:
            super()._add_auth_header(request)
            return
        request.headers["Authorization"] = f"DPoP {tokens.access_token}"
        self.dpop.sign(request, access_token=tokens.access_token)

    async def _exchange_token_authorization_code(self, auth_code: str, code_verifier: str) -> httpx2.Request:
        request = await super()._exchange_token_authorization_code(auth_code, code_verifier)
        if self.dpop is not None:
            self.dpop.sign(request)
        return request

    async def _refresh_token(self) -> httpx2.Request:
        request = await super()._refresh_token()
        if self.dpop is not None:
            self.dpop.sign(request)
        return request

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(await self._as_bearer(response))

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        return await super()._handle_refresh_response(await self._as_bearer(response))

    async def _as_bearer(self, response: httpx2.Response) -> httpx2.Response:
        """The token response as the SDK reads it (it knows only ``Bearer``), noting how the token is
        to be presented: ``DPoP`` when the server bound it to our key (RFC 9449 §5)."""
        if self.dpop is None or response.status_code not in (200, 201):
            return response
        body = await response.aread()
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return response
        if not isinstance(data, dict) or str(data.get("token_type", "")).lower() != "dpop":
            self.token_scheme = "Bearer"  # the server did not bind it: RFC 9449 lets it be a bearer token
            return response
        self.token_scheme = "DPoP"
        data["token_type"] = "Bearer"
        return httpx2.Response(
            response.status_code,
            content=orjson.dumps(data),
            headers={"Content-Type": "application/json"},
            request=response.request,
        )

    async def _will_refresh(self) -> bool:
        grant = await self.store.load_grant()
        if grant is None or grant.tokens is None or not grant.tokens.refresh_token:
            return False
        return grant.expires_at is not None and grant.expires_at - REFRESH_EARLY_SECONDS <= time.time()

    async def _initialize(self) -> None:
        """Load the stored grant with its expiry and metadata (the SDK loads tokens alone)."""
        grant = await self.store.load_grant()
        self.context.client_info = await self.store.load_client()
        self.context.current_tokens = grant.tokens if grant is not None else None
        if grant is not None:
            if grant.expires_at is not None:
                self.context.token_expiry_time = grant.expires_at - REFRESH_EARLY_SECONDS
            self.context.oauth_metadata = self.context.oauth_metadata or grant.oauth_metadata
            self.context.protected_resource_metadata = (
                self.context.protected_resource_metadata or grant.protected_resource
            )
            self.context.auth_server_url = self.context.auth_server_url or grant.auth_server_url
            self._load_dpop(grant)
        self._initialized = True

    def _load_dpop(self, grant: StoredGrant) -> None:
        """Prove with the key the stored tokens are bound to (another replica may have made it)."""
        self.token_scheme = grant.token_scheme if self.dpop is not None else "Bearer"
        if self.dpop is None or grant.dpop_key is None or grant.dpop_key == self._dpop_pem():
            return
        nonces = self.dpop.nonces
        self.dpop = DpopKey.from_pem(grant.dpop_key)
        self.dpop.nonces.update(nonces)

    def _dpop_pem(self) -> str | None:
        return self.dpop.to_pem() if self.dpop is not None else None

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        """The authorization request the SDK would make, answered by the ``Consent`` strategy."""
        context = self.context
        if context.client_info is None:
            raise OAuthFlowError("no client registration is available for the authorization request")
        redirect_uri = str((context.client_metadata.redirect_uris or [""])[0])
        if context.oauth_metadata is not None and context.oauth_metadata.authorization_endpoint:
            endpoint = str(context.oauth_metadata.authorization_endpoint)
        else:
            endpoint = urljoin(context.get_authorization_base_url(context.server_url), "/authorize")
        pkce = PKCEParameters.generate()
        state = _secrets.token_urlsafe(32)
        params = {
            "response_type": "code",
            "client_id": context.client_info.client_id,
            "redirect_uri": redirect_uri,
            "state": state,
            "code_challenge": pkce.code_challenge,
            "code_challenge_method": "S256",
        }
        if context.should_include_resource_param(context.protocol_version):
            params["resource"] = context.get_resource_url()  # RFC 8707
        scope = _union(context.client_metadata.scope, self.configured_scopes)
        if scope:
            context.client_metadata.scope = scope
            params["scope"] = scope
        if self.always_ask:
            params["prompt"] = "consent"
        elif scope and "offline_access" in scope.split():  # OpenID Connect asks for it with offline access
            params["prompt"] = "consent"
        request = AuthorizationRequest(
            url=f"{endpoint}?{urlencode(params)}",
            state=state,
            code_verifier=pkce.code_verifier,
            redirect_uri=redirect_uri,
            issuer=str(context.oauth_metadata.issuer) if context.oauth_metadata else None,
        )
        result, answered = await self.consent.authorize(request)
        current = str(context.oauth_metadata.issuer) if context.oauth_metadata else None
        if answered.issuer is not None and current is not None and answered.issuer != current:
            raise OAuthFlowError("the authorization server changed since the user was sent to it")
        if result.state is None or not _secrets.compare_digest(result.state, answered.state):
            raise OAuthFlowError("the authorization response's state does not match the request")
        validate_authorization_response_iss(result.iss, context.oauth_metadata)  # RFC 9207
        if not result.code:
            raise OAuthFlowError("no authorization code was received")
        return result.code, answered.code_verifier


class _ReportingFlow(httpx2.Auth):
    """One call's view of a ``UserOAuth``: reports the tokens the flow holds at each of its requests.

    The SDK runs a flow under its lock from the first request to the last, so between two of them
    the flow's tokens (loaded, refreshed or just obtained) are the ones serving this call.
    """

    def __init__(self, flow: UserOAuth, sink: SecretSink) -> None:
        self.flow = flow
        self.sink = sink

    async def async_auth_flow(self, request: httpx2.Request):  # type: ignore[no-untyped-def,override]
        flow = self.flow.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                self._report()
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def _report(self) -> None:
        tokens = self.flow.context.current_tokens
        for value in (tokens.access_token, tokens.refresh_token) if tokens is not None else ():
            if value:
                self.sink(value)


def _union(*scopes: str | list[str] | None) -> str | None:
    seen: list[str] = []
    for scope in scopes:
        for token in scope.split() if isinstance(scope, str) else scope or []:
            if token not in seen:
                seen.append(token)
    return " ".join(seen) or None


async def _unused_redirect(_url: str) -> None:  # the SDK requires handlers; ``Consent`` replaces them
    raise AssertionError("UserOAuth authorizes through its Consent strategy")


async def _unused_callback() -> AuthorizationCodeResult:
    raise AssertionError("UserOAuth authorizes through its Consent strategy")


logging.getLogger("mcp.client.auth.oauth2").addFilter(_PendingIsNotAnError())
