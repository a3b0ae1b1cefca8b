"""OAuth resource-server mode of an MCP endpoint (``mcp_endpoints[].oauth``).

For MCP clients that require OAuth (the MCP authorization spec): the endpoint publishes its
protected resource metadata (RFC 9728) at ``/.well-known/oauth-protected-resource/mcp/<name>``,
naming the configured authorization server; a request without a valid token is 401 with
``WWW-Authenticate: Bearer resource_metadata="…"``. A token is accepted only when it was issued by
that server for this endpoint (``aud``), is unexpired, carries the required scopes, and:

- with ``jwks_url``: its signature verifies against the server's published keys (``access/jwks.py``:
  PyJWT, asymmetric algorithms only; refetched for an unknown key, at most every 30 s);
- with ``introspection_url``: the server says it is active (RFC 7662, the gateway authenticating
  with its client id and a vault secret); an active answer is reused for at most 60 s.

The token's subject is the end user (``X-On-Behalf-Of`` from the client is ignored): per-user OAuth
servers act as that user, operations belong to them. The token itself never goes upstream (no
token passthrough): upstream credentials come from the vault.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from hatchway.access.jwks import KeySet, TokenInvalid, get_json
from hatchway.config.settings import McpEndpointOAuth
from hatchway.errors import AuthenticationError, ConfigError

INTROSPECTION_CACHE_SECONDS = 60.0
INTROSPECTION_CACHE_ENTRIES = 10_000
METADATA_PREFIX = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, slots=True)
class TokenSubject:
    subject: str
    scopes: tuple[str, ...]


class TokenRejected(AuthenticationError):
    """The bearer is not a valid access token for this endpoint (the reason is for the log only)."""

    default_code = "invalid_token"

    def __init__(self, reason: str) -> None:
        super().__init__("The access token is not valid for this MCP endpoint.")
        self.reason = reason


class ResourceServer:
    """Validates one endpoint's OAuth access tokens and describes it (see the module docstring)."""

    def __init__(
        self, name: str, config: McpEndpointOAuth, *, base_url: str | None, secret: Any, timeout: float = 10.0
    ) -> None:
        self.name = name
        self.config = config
        if not base_url and not config.audience:
            # Never the Host a request names: a token for another local resource would pass.
            raise ConfigError(
                "hatchway.yaml",
                [
                    (
                        f"mcp_endpoints[{name}].oauth.audience",
                        "set public_base_url or oauth.audience: the "
                        "address this endpoint's tokens must be issued for",
                    )
                ],
            )
        self.base_url = (base_url or "").rstrip("/")
        self.resource = config.audience or f"{self.base_url}/mcp/{name}"
        """The endpoint's URL: the audience its tokens must carry."""
        self.metadata_url = f"{self.base_url}{METADATA_PREFIX}/mcp/{name}" if self.base_url else None
        self._secret = secret
        """``async (ref) -> str``: the introspection client's secret from the vault."""
        self._http = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self._keys = KeySet(config.jwks_url, self._http) if config.jwks_url else None
        self._active: OrderedDict[str, tuple[float, TokenSubject]] = OrderedDict()

    def metadata(self) -> dict[str, Any]:
        """The protected resource metadata document (RFC 9728)."""
        body: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": [self.config.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": f"Hatchway MCP endpoint {self.name}",
        }
        if self.config.scopes:
            body["scopes_supported"] = list(self.config.scopes)
        return body

    def challenge(self, error: str | None = None) -> str:
        """The ``WWW-Authenticate`` value of a 401 from this endpoint."""
        parts = [f'resource_metadata="{self.metadata_url}"'] if self.metadata_url else ['realm="hatchway"']
        if self.config.scopes:
            parts.append(f'scope="{" ".join(self.config.scopes)}"')
        if error:
            parts.append(f'error="{error}"')
        return "Bearer " + ", ".join(parts)

    async def validate(self, token: str) -> TokenSubject:
        """The end user behind ``token``; TokenRejected when it is not valid here."""
        audience = self.resource
        check = self._verify_jwt if self.config.jwks_url else self._introspect
        found = await check(token, audience)
        missing = [s for s in self.config.scopes if s not in found.scopes]
        if missing:
            raise TokenRejected(f"missing scope {missing[0]}")
        return found

    async def close(self) -> None:
        await self._http.aclose()

    # -- JWKS ----------------------------------------------------------------------------------------

    async def _verify_jwt(self, token: str, audience: str) -> TokenSubject:
        assert self._keys is not None
        try:
            claims = await self._keys.verify(
                token,
                issuer=self.config.issuer,
                audience=audience,
                algorithms=self.config.algorithms,
                leeway=30,
            )
        except TokenInvalid as exc:
            raise TokenRejected(exc.reason) from None
        return self._subject(claims)

    # -- introspection -------------------------------------------------------------------------------

    async def _introspect(self, token: str, audience: str) -> TokenSubject:
        digest = hashlib.sha256(f"{audience}\0{token}".encode()).hexdigest()
        now = time.monotonic()
        cached = self._active.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        config = self.config
        assert config.introspection_url is not None and config.client_id and config.secret_ref
        secret = await self._secret(config.secret_ref)
        try:
            answer = await get_json(
                self._http,
                "POST",
                config.introspection_url,
                data={"token": token, "token_type_hint": "access_token"},
                auth=(config.client_id, secret),
            )
        except (httpx.HTTPError, ValueError) as exc:
            raise TokenRejected(f"introspection failed ({type(exc).__name__})") from None
        if answer.get("active") is not True:
            raise TokenRejected("inactive")
        if answer.get("iss") not in (None, config.issuer):
            raise TokenRejected("another issuer")
        granted = answer.get("aud")
        if audience not in (granted if isinstance(granted, list) else [granted]):
            raise TokenRejected("another audience")
        expires = answer.get("exp")
        if isinstance(expires, int | float) and expires <= time.time():
            raise TokenRejected("expired")
        found = self._subject(answer)
        keep = INTROSPECTION_CACHE_SECONDS
        if isinstance(expires, int | float):
            keep = min(keep, expires - time.time())
        self._active[digest] = (now + keep, found)
        self._active.move_to_end(digest)
        while len(self._active) > INTROSPECTION_CACHE_ENTRIES:
            self._active.popitem(last=False)
        return found

    # -- shared --------------------------------------------------------------------------------------

    def _subject(self, claims: dict[str, Any]) -> TokenSubject:
        subject = claims.get(self.config.subject_claim)
        if not isinstance(subject, str) or not subject or len(subject) > 256:
            raise TokenRejected(f"no usable {self.config.subject_claim!r} claim")
        scope = claims.get("scope")
        scopes = tuple(scope.split()) if isinstance(scope, str) else tuple(claims.get("scp") or ())
        return TokenSubject(subject, scopes)
