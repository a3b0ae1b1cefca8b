"""Signing a person in with OpenID Connect: authorization code + PKCE against ``access.sso.issuer``.

The flow (``api/sso.py`` serves its routes):

1. ``start``: a random ``state``, ``nonce`` and PKCE verifier are kept in ``sso_logins`` (any replica
   may receive the callback), with the SHA-256 of a second random value, the *browser binding*, that
   goes to the browser in a short-lived pre-login cookie; the browser is sent to the provider with
   authlib's authorization URL (``code_challenge_method=S256``).
2. ``finish``: the callback's ``state`` is redeemed once, and only with the same browser's binding: a
   ``state`` begun in another browser (login CSRF), forged, expired or already used is refused. The
   code is exchanged with the verifier (authlib), and the ID token is verified against the provider's
   keys (``access/jwks.py``: signature with an asymmetric algorithm, issuer, audience = ``client_id``,
   expiry) and must carry the login's ``nonce``.
3. The groups (``groups_claim``, from the ID token or else the userinfo answer of the same subject)
   are mapped to a role per organisation (``role_mappings``); no role mapped, no session.

The discovery document is kept ``DISCOVERY_TTL_SECONDS``: it describes the provider, not a person.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import httpx2
from authlib.integrations.base_client import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from sqlalchemy import delete, func, select

from hatchway.access.jwks import KeySet, TokenInvalid, get_json
from hatchway.access.sessions import Grants, SsoLoginRow
from hatchway.config.access import SsoSettings
from hatchway.environment import env_value
from hatchway.errors import IdentityProviderUnavailable as ProviderUnavailable
from hatchway.errors import NoRoleMapped, NotFound, SignInFailed, SignInInvalid
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.store.tables import utcnow

logger = logging.getLogger(__name__)

DISCOVERY_TTL_SECONDS = 3600.0
ID_TOKEN_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""Asymmetric signatures only: never ``none``, never an HMAC keyed with the client secret."""
ID_TOKEN_LEEWAY_SECONDS = 60.0
MAX_STATE_CHARS = 128
MAX_SUBJECT_CHARS = 256

SecretLookup = Callable[[str], Awaitable[str]]
"""``secret.<name>`` → its value (the vault's ``system`` organisation)."""


@dataclass(frozen=True, slots=True)
class PendingLogin:
    """What a redeemed sign-in kept for its callback."""

    nonce: str
    code_verifier: str
    redirect_uri: str
    next_path: str


@dataclass(frozen=True, slots=True)
class Identity:
    """A person the provider vouched for, and what they may do here."""

    subject: str
    name: str | None
    email: str | None
    grants: Grants
    next_path: str
    """Where the browser goes once signed in (a path under ``/ui/``, checked at ``start``)."""
    groups: frozenset[str] = frozenset()
    """The groups claim's values (approvals routed to a group are offered to its members)."""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class SignIn:
    """The OpenID Connect client of ``access.sso`` (one per process; sign-ins live in the database)."""

    def __init__(
        self,
        settings: SsoSettings,
        db: Database,
        orgs: OrgStore,
        *,
        secret_lookup: SecretLookup | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.db = db
        self.orgs = orgs
        self.clock = clock
        self._secret_lookup = secret_lookup
        self._http = httpx.AsyncClient(timeout=settings.timeout_seconds, follow_redirects=False)
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._keys: KeySet | None = None
        self._lock = asyncio.Lock()

    async def start(self, redirect_uri: str, next_path: str) -> tuple[str, str]:
        """(the provider's authorization URL, the browser binding for the pre-login cookie)."""
        metadata = await self.metadata()
        state, nonce, binding = (secrets.token_urlsafe(32) for _ in range(3))
        verifier = secrets.token_urlsafe(64)  # 86 characters: within PKCE's 43 to 128
        now = self.clock()
        row = SsoLoginRow(
            state_hash=_digest(state),
            binding_hash=_digest(binding),
            nonce=nonce,
            code_verifier=verifier,
            redirect_uri=redirect_uri,
            next_path=next_path,
            expires_at=now + timedelta(seconds=self.settings.login_seconds),
        )
        async with self.db.session() as s:
            await s.execute(delete(SsoLoginRow).where(SsoLoginRow.expires_at < now))
            pending = (await s.scalar(select(func.count()).select_from(SsoLoginRow))) or 0
            if pending >= self.settings.max_pending_logins:
                # The oldest sign-ins under way make room: refusing new ones instead would let anyone
                # who starts max_pending_logins sign-ins lock every person out for login_seconds.
                oldest = select(SsoLoginRow.state_hash).order_by(SsoLoginRow.expires_at)
                room = oldest.limit(pending - self.settings.max_pending_logins + 1).scalar_subquery()
                await s.execute(delete(SsoLoginRow).where(SsoLoginRow.state_hash.in_(room)))
            s.add(row)
        async with await self._client(metadata) as client:
            url, _ = client.create_authorization_url(
                metadata["authorization_endpoint"],
                state=state,
                code_verifier=verifier,
                nonce=nonce,
                redirect_uri=redirect_uri,
            )
        return url, binding

    async def finish(self, state: str | None, code: str | None, binding: str | None) -> Identity:
        """The person behind a callback; SignInInvalid, SignInFailed, NoRoleMapped or ProviderUnavailable."""
        login = await self._redeem(state, binding)
        if not code:
            raise SignInFailed("The provider's answer has no authorization code: sign in again.")
        metadata = await self.metadata()
        claims, access_token = await self._exchange(metadata, login, code)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise SignInFailed("The provider's ID token has no usable subject ('sub').")
        if self.settings.groups_claim not in claims and access_token and metadata.get("userinfo_endpoint"):
            claims = {**await self._userinfo(metadata, access_token, subject), **claims}
        groups = _groups(claims.get(self.settings.groups_claim))
        grants = await self._grants(groups)
        if not grants:
            raise NoRoleMapped(
                f"You signed in as {subject}, but none of your groups ('{self.settings.groups_claim}') "
                "is given a role in this gateway: ask its administrators to map one "
                "(access.sso.role_mappings).",
                subject=subject,
            )
        name = claims.get("name") or claims.get("preferred_username")
        email = claims.get("email")
        return Identity(
            subject=subject,
            name=name[:256] if isinstance(name, str) else None,
            email=email[:320] if isinstance(email, str) else None,
            grants=grants,
            next_path=login.next_path,
            groups=frozenset(g for g in groups if isinstance(g, str) and 0 < len(g) <= 256),
        )

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (cached), its ``issuer`` the one configured."""
        async with self._lock:
            if self._metadata is not None and time.monotonic() - self._metadata_at < DISCOVERY_TTL_SECONDS:
                return self._metadata
            issuer = self.settings.issuer
            url = issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                document = await get_json(self._http, "GET", url)
            except (httpx.HTTPError, ValueError) as exc:
                raise ProviderUnavailable(
                    f"access.sso.issuer: the discovery document {url} could not be read "
                    f"({type(exc).__name__})"
                ) from None
            if document.get("issuer") != issuer:
                raise ProviderUnavailable(
                    f"access.sso.issuer: the provider names itself {document.get('issuer')!r}, not {issuer!r}"
                )
            missing = [
                k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)
            ]
            if missing:
                raise ProviderUnavailable(f"access.sso.issuer: the discovery document has no {missing[0]}")
            if self._keys is None or self._keys.url != document["jwks_uri"]:
                self._keys = KeySet(document["jwks_uri"], self._http)
            self._metadata, self._metadata_at = document, time.monotonic()
            return document

    async def _redeem(self, state: str | None, binding: str | None) -> PendingLogin:
        """The sign-in ``state`` names, deleted so it serves once, when ``binding`` is its browser's."""
        if not state or len(state) > MAX_STATE_CHARS:
            raise SignInInvalid("The provider's answer has no valid 'state': sign in again.", param="state")
        if not binding or len(binding) > MAX_STATE_CHARS:
            raise SignInInvalid("This sign-in was not started in this browser: sign in again.", param="state")
        now = self.clock()
        async with self.db.session() as s:
            row = await s.get(SsoLoginRow, _digest(state))
            if row is None or row.expires_at <= now:
                raise SignInInvalid(
                    "This sign-in is unknown, expired or already used: sign in again.", param="state"
                )
            if not hmac.compare_digest(row.binding_hash, _digest(binding)):
                raise SignInInvalid(
                    "This sign-in was not started in this browser: sign in again.", param="state"
                )
            pending = PendingLogin(row.nonce, row.code_verifier, row.redirect_uri, row.next_path)
            taken = await s.execute(delete(SsoLoginRow).where(SsoLoginRow.state_hash == row.state_hash))
            if taken.rowcount != 1:  # type: ignore[attr-defined]  # another request redeemed it first
                raise SignInInvalid("This sign-in was already used: sign in again.", param="state")
        return pending

    async def _exchange(
        self, metadata: dict[str, Any], login: PendingLogin, code: str
    ) -> tuple[dict[str, Any], str]:
        """The verified ID token's claims and the access token, for the code and its verifier."""
        try:
            async with await self._client(metadata) as client:
                token = await client.fetch_token(
                    metadata["token_endpoint"],
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=login.code_verifier,
                    redirect_uri=login.redirect_uri,
                )
        except OAuthError as exc:
            raise SignInFailed(f"The provider refused the code ({exc.error}): sign in again.") from None
        except (httpx2.HTTPError, ValueError) as exc:
            raise ProviderUnavailable(
                f"The provider's token endpoint could not be reached ({type(exc).__name__})."
            ) from None
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise SignInFailed("The provider sent no ID token (is 'openid' among access.sso.scopes?).")
        assert self._keys is not None  # set with the metadata
        try:
            claims = await self._keys.verify(
                id_token,
                issuer=metadata["issuer"],
                audience=self.settings.client_id,
                algorithms=ID_TOKEN_ALGORITHMS,
                leeway=ID_TOKEN_LEEWAY_SECONDS,
            )
        except TokenInvalid as exc:
            raise SignInFailed(f"The provider's ID token is not valid ({exc.reason}).") from None
        if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"], login.nonce):
            raise SignInFailed("The provider's ID token does not carry this sign-in's nonce.")
        audience = claims.get("aud")
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.settings.client_id:
            raise SignInFailed("The provider's ID token was issued to another party ('azp').")
        access_token = token.get("access_token")
        return claims, access_token if isinstance(access_token, str) else ""

    async def _userinfo(self, metadata: dict[str, Any], access_token: str, subject: str) -> dict[str, Any]:
        """The userinfo answer, when it is about ``subject`` (OIDC Core 5.3.2); {} when unreadable."""
        try:
            info = await get_json(
                self._http,
                "GET",
                metadata["userinfo_endpoint"],
                headers={"authorization": f"Bearer {access_token}"},
            )
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning("sso: the userinfo endpoint could not be read (%s)", type(exc).__name__)
            return {}
        if info.get("sub") != subject:
            raise SignInFailed("The provider's userinfo answer is about another subject.")
        return info

    async def _grants(self, groups: set[str]) -> Grants:
        grants = Grants()
        for mapping in self.settings.role_mappings:
            if mapping.group not in groups:
                continue
            if mapping.role == "platform":
                grants = Grants(grants.orgs, platform=True)
                continue
            assert mapping.organisation is not None  # SsoRoleMapping requires one
            try:
                org = await self.orgs.get_org(mapping.organisation)
            except NotFound:
                logger.warning(
                    "access.sso.role_mappings: no organisation %r; the mapping is skipped",
                    mapping.organisation,
                )
                continue
            grants = grants.with_role(org.id, org.name, Role(mapping.role))
        return grants

    async def _client(self, metadata: dict[str, Any]) -> AsyncOAuth2Client:
        """authlib's client for one sign-in (it holds that sign-in's tokens: never shared)."""
        secret = await self._client_secret()
        method = "none"
        if secret is not None:
            offered = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            method = "client_secret_basic" if "client_secret_basic" in offered else "client_secret_post"
        return AsyncOAuth2Client(
            client_id=self.settings.client_id,
            client_secret=secret,
            token_endpoint_auth_method=method,
            scope=" ".join(self.settings.scopes),
            code_challenge_method="S256",
            timeout=self.settings.timeout_seconds,
        )

    async def _client_secret(self) -> str | None:
        ref = self.settings.client_secret
        if ref is None:
            return None
        if ref.startswith("env:"):
            value = env_value(ref[4:])
            if not value:
                raise ProviderUnavailable(
                    f"access.sso.client_secret: environment variable {ref[4:]} is not set"
                )
            return value
        if ref.startswith("secret."):
            if self._secret_lookup is None:
                raise ProviderUnavailable("access.sso.client_secret: secret.<name> needs the vault")
            return await self._secret_lookup(ref)
        return ref

    async def close(self) -> None:
        await self._http.aclose()


def _groups(value: Any) -> set[str]:
    """The groups claim as a set: a list of names (or ids), or one name."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {g for g in value if isinstance(g, str)}
    return set()
