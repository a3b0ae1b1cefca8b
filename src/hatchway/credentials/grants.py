"""The gateway's per-user OAuth: each end user's grants, sealed in the database, and the consent step
held in the conversation.

A per-user server (``auth: {type: oauth, grant: authorization_code}``) is reached as the run's end
user (``X-On-Behalf-Of``). Everything that user's authorization leaves behind is kept per
(organisation, end user, server) in ``user_oauth_grants``, sealed with the organisation's vault
data key: the tokens, their expiry and the metadata refreshing them needs, so any replica uses and
refreshes a token another one obtained. A client registration (dynamic or from a Client ID
Metadata Document) is per (organisation, server) in ``oauth_clients``.

When the user has not authorized the server (or a refresh was refused), ``ConversationConsent``
records a pending authorization in ``oauth_consents`` and raises ``AuthorizationPending`` with a
one-time link, ``/oauth/connect/{id}``; the run pauses with that link as its answer. The link
redirects to the authorization server; its redirect comes back to ``/oauth/callback``, whose
``state`` must match a pending authorization that has not expired (single use: a replayed or
foreign state is refused). The callback records the code and completes the grant at once, through
the same client code a call uses (``complete_grant``); the user's next turn finds the token.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import delete, select, update

from hatchway.credentials.requester import Requester
from hatchway.credentials.store import OAuthClientRow, OAuthConsentRow, UserGrantRow
from hatchway.store.cache import Cache
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from hatchway.vault.store import Vault

if TYPE_CHECKING:
    # The MCP SDK loads with the first per-user call, not with the gateway (see ``mcp/pool.py``).
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull

    from hatchway.credentials.consent import AuthorizationRequest
    from hatchway.credentials.user_oauth import StoredGrant, UserOAuth

logger = logging.getLogger(__name__)

_GRANT = "user-oauth-grant"
_CLIENT = "oauth-client"
_CONSENT = "oauth-consent"
_REFRESH_LOCK_SECONDS = 20.0
"""How long a refreshing replica may hold a user's refresh lock (and a waiting one wait for it)."""
CALLBACK_PATH = "/oauth/callback"
CONNECT_PATH = "/oauth/connect"
CLIENT_METADATA_PATH = "/oauth/client-metadata.json"


_LATER_AUTH_FIELDS = {
    "dpop": False,
    "assertion_ref": None,
    "idp_token_url": None,
    "idp_client_id": None,
    "subject_token_ref": None,
    "subject_token_type": "id_token",
}
"""Auth fields added after grants were first keyed: left out while they hold their default, so the
grants users made before keep their key (``dpop: true`` is another server: a token bound to a key)."""


def server_key(server: Any) -> str:
    """What identifies a per-user server's grants: its URL and its auth block (not the plugin's id)."""
    auth = server.auth.model_dump(mode="json")
    for name, default in _LATER_AUTH_FIELDS.items():
        if auth.get(name, default) == default:
            auth.pop(name, None)
    identity = [server.url, auth]
    return hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Connection:
    """What ``GET /v1/connections`` shows of one grant: never a token."""

    user: str
    server: str
    server_url: str
    scopes: list[str]
    expires_at: datetime | None
    connected_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "connection",
            "user": self.user,
            "server": self.server,
            "server_url": self.server_url,
            "scopes": self.scopes,
            "expires_at": int(self.expires_at.timestamp()) if self.expires_at else None,
            "connected_at": int(self.connected_at.timestamp()),
            "updated_at": int(self.updated_at.timestamp()),
        }


class _DbGrants:
    """``GrantStore`` over the database for one (organisation, end user, server)."""

    def __init__(self, service: UserGrantService, org_id: str, server: Any, user: str) -> None:
        self.service = service
        self.org_id = org_id
        self.user = user
        self.server = server
        self.key = server_key(server)
        self.client_secret: str | None = None

    async def load_grant(self) -> StoredGrant | None:
        async with self.service.db.session() as session:
            row = await session.get(UserGrantRow, (self.org_id, self.user, self.key))
        if row is None:
            return None
        from hatchway.credentials.user_oauth import StoredGrant

        plain = await self.service.vault.open_blob(self.org_id, row.sealed, purpose=_GRANT)
        return StoredGrant.from_json(orjson.loads(plain))

    async def save_grant(self, grant: StoredGrant) -> None:
        sealed = await self.service.vault.seal_blob(
            self.org_id, orjson.dumps(grant.to_json()), purpose=_GRANT
        )
        expires = datetime.fromtimestamp(grant.expires_at, utcnow().tzinfo) if grant.expires_at else None
        scopes = grant.tokens.scope if grant.tokens else None
        async with self.service.db.session() as session:
            row = await session.get(UserGrantRow, (self.org_id, self.user, self.key))
            if row is None:
                session.add(
                    UserGrantRow(
                        org_id=self.org_id,
                        end_user=self.user,
                        server_key=self.key,
                        server_id=self.server.id,
                        server_url=self.server.url,
                        sealed=sealed,
                        scopes=scopes,
                        expires_at=expires,
                    )
                )
            else:
                row.sealed, row.scopes, row.expires_at, row.updated_at = sealed, scopes, expires, utcnow()

    async def load_client(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        from hatchway.credentials.user_oauth import pre_registered

        auth = self.server.auth
        if auth.client_id:  # pre-registered: from the plugin and the vault, never stored again
            return pre_registered(
                auth.client_id, self.client_secret, self.service.redirect_uri, auth.client_auth
            )
        async with self.service.db.session() as session:
            row = await session.get(OAuthClientRow, (self.org_id, self.key))
        if row is None:
            return None
        plain = await self.service.vault.open_blob(self.org_id, row.sealed, purpose=_CLIENT)
        return OAuthClientInformationFull.model_validate_json(plain)

    async def save_client(self, client: OAuthClientInformationFull) -> None:
        if self.server.auth.client_id:
            return
        plain = client.model_dump_json(exclude_none=True).encode()
        sealed = await self.service.vault.seal_blob(self.org_id, plain, purpose=_CLIENT)
        async with self.service.db.session() as session:
            row = await session.get(OAuthClientRow, (self.org_id, self.key))
            if row is None:
                session.add(OAuthClientRow(org_id=self.org_id, server_key=self.key, sealed=sealed))
            else:
                row.sealed = sealed


class ConversationConsent:
    """The person's step of the grant, held as durable state: a link now, the code on a later request."""

    def __init__(self, service: UserGrantService, org_id: str, server: Any, user: str, *, trusted: bool):
        self.service = service
        self.org_id = org_id
        self.server = server
        self.user = user
        self.trusted = trusted

    async def authorize(
        self, request: AuthorizationRequest
    ) -> tuple[AuthorizationCodeResult, AuthorizationRequest]:
        from hatchway.credentials.consent import AuthorizationPending

        service, key, org = self.service, server_key(self.server), self.org_id
        redeemed = await service.redeem(org, self.user, key)
        if redeemed is not None:
            return redeemed
        link = await service.pending_link(org, self.user, key)
        if link is None:
            link = await service.open_consent(org, self.user, self.server, request, trusted=self.trusted)
        raise AuthorizationPending(link, server_id=self.server.id)


class UserGrantService:
    """Implements ``UserGrants`` for the gateway (``VaultCredentials.user_grants``)."""

    needs_end_user = True

    def __init__(
        self,
        db: Database,
        vault: Vault,
        *,
        public_base_url: str,
        consent_ttl_seconds: float = 600.0,
        max_cached_flows: int = 1024,
        cache: Cache | None = None,
    ) -> None:
        self.db = db
        self.cache = cache
        """Shared by the replicas (Redis): its lock makes one of them refresh a user's token at a time."""
        self.vault = vault
        self.public_base_url = public_base_url.rstrip("/")
        self.consent_ttl = timedelta(seconds=consent_ttl_seconds)
        self.max_cached_flows = max_cached_flows
        self._flows: OrderedDict[tuple[str, str, str], UserOAuth] = OrderedDict()

    @property
    def redirect_uri(self) -> str:
        return self.public_base_url + CALLBACK_PATH

    @property
    def client_metadata_url(self) -> str | None:
        """Hatchway's Client ID Metadata Document, when it is served over https (as CIMD requires)."""
        if self.public_base_url.startswith("https://"):
            return self.public_base_url + CLIENT_METADATA_PATH
        return None

    async def flow(
        self, server: Any, who: Requester, *, client_secret: str | None, trusted: bool = True
    ) -> UserOAuth:
        """The (cached) flow of this run's end user for ``server``; it reloads the stored grant on
        every request, so a token refreshed by another replica is seen, and one process refreshes
        it once (the flow's lock)."""
        user = who.end_user or ""
        key = (who.org_id, user, server_key(server))
        flow = self._flows.get(key)
        if flow is None:
            from hatchway.credentials.user_oauth import UserOAuth

            store = _DbGrants(self, who.org_id, server, user)
            flow = UserOAuth(
                server.url,
                redirect_uri=self.redirect_uri,
                store=store,
                consent=ConversationConsent(self, who.org_id, server, user, trusted=trusted),
                scopes=list(server.auth.scopes),
                client_metadata_url=self.client_metadata_url,
                auth_method=server.auth.client_auth,
                refresh_lock=self._refresh_lock(key) if self.cache is not None else None,
                always_ask=True,
                dpop=server.auth.dpop,
            )
            self._flows[key] = flow
            while len(self._flows) > self.max_cached_flows:
                self._flows.popitem(last=False)
        self._flows.move_to_end(key)
        store = flow.store
        assert isinstance(store, _DbGrants)
        store.client_secret = client_secret
        consent = flow.consent
        assert isinstance(consent, ConversationConsent)
        consent.trusted = trusted  # this call's, not the first caller's
        flow._initialized = False  # reload the stored grant (see the docstring)
        return flow

    def _refresh_lock(self, key: tuple[str, str, str]) -> Any:
        cache = self.cache
        assert cache is not None
        name = "user-oauth-refresh:" + hashlib.sha256(orjson.dumps(list(key))).hexdigest()[:32]
        return lambda: cache.lock(name, hold_seconds=_REFRESH_LOCK_SECONDS)

    # -- consents --------------------------------------------------------------------------------

    async def open_consent(
        self, org_id: str, user: str, server: Any, request: AuthorizationRequest, *, trusted: bool
    ) -> str:
        consent_id = "oc_" + secrets.token_urlsafe(24)
        payload = {
            "url": request.url,
            "state": request.state,
            "code_verifier": request.code_verifier,
            "redirect_uri": request.redirect_uri,
            "issuer": request.issuer,
            "server": server.model_dump(mode="json"),
        }
        sealed = await self.vault.seal_blob(org_id, orjson.dumps(payload), purpose=_CONSENT)
        async with self.db.session() as session:
            await session.execute(  # authorizations long expired or redeemed: nothing needs them
                delete(OAuthConsentRow).where(
                    OAuthConsentRow.org_id == org_id, OAuthConsentRow.expires_at < utcnow() - self.consent_ttl
                )
            )
            session.add(
                OAuthConsentRow(
                    id=consent_id,
                    org_id=org_id,
                    end_user=user,
                    server_key=server_key(server),
                    server_id=server.id,
                    state_hash=_state_hash(request.state),
                    status="pending",
                    sealed=sealed,
                    trusted=trusted,
                    expires_at=utcnow() + self.consent_ttl,
                )
            )
        return f"{self.public_base_url}{CONNECT_PATH}/{consent_id}"

    async def _latest(self, org_id: str, user: str, key: str, status: str) -> OAuthConsentRow | None:
        """This user's newest unexpired authorization of the server in ``status``."""
        async with self.db.session() as session:
            return (
                await session.execute(
                    select(OAuthConsentRow)
                    .where(
                        OAuthConsentRow.org_id == org_id,
                        OAuthConsentRow.end_user == user,
                        OAuthConsentRow.server_key == key,
                        OAuthConsentRow.status == status,
                        OAuthConsentRow.expires_at > utcnow(),
                    )
                    .order_by(OAuthConsentRow.created_at.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()

    async def pending_link(self, org_id: str, user: str, key: str) -> str | None:
        """The link of this user's unexpired pending authorization of the server, if any (one at a time)."""
        row = await self._latest(org_id, user, key, "pending")
        return f"{self.public_base_url}{CONNECT_PATH}/{row.id}" if row is not None else None

    async def authorization_url(self, consent_id: str) -> str | None:
        """Where ``/oauth/connect/{id}`` sends the person: the pending authorization's URL, or None."""
        found = await self.pending_consent(consent_id)
        return found[0] if found is not None else None

    async def pending_consent(self, consent_id: str) -> tuple[str, OAuthConsentRow] | None:
        """The pending, unexpired authorization behind a consent link: its URL and its row."""
        async with self.db.session() as session:
            row = await session.get(OAuthConsentRow, consent_id)
        if row is None or row.status != "pending" or row.expires_at <= utcnow():
            return None
        payload = orjson.loads(await self.vault.open_blob(row.org_id, row.sealed, purpose=_CONSENT))
        return str(payload["url"]), row

    async def accept_callback(self, state: str, code: str, iss: str | None) -> OAuthConsentRow | None:
        """The redirect came back: mark its pending authorization ``authorized`` (once) with the code.

        None for a state that matches no pending, unexpired authorization: replayed, foreign or late.
        """
        async with self.db.session() as session:
            row = (
                await session.execute(
                    select(OAuthConsentRow).where(OAuthConsentRow.state_hash == _state_hash(state))
                )
            ).scalar_one_or_none()
        if row is None or row.status != "pending" or row.expires_at <= utcnow():
            return None
        payload = orjson.loads(await self.vault.open_blob(row.org_id, row.sealed, purpose=_CONSENT))
        if not secrets.compare_digest(str(payload["state"]), state):
            return None
        payload |= {"code": code, "iss": iss}
        sealed = await self.vault.seal_blob(row.org_id, orjson.dumps(payload), purpose=_CONSENT)
        async with self.db.session() as session:
            claimed = await session.execute(
                update(OAuthConsentRow)
                .where(OAuthConsentRow.id == row.id, OAuthConsentRow.status == "pending")
                .values(status="authorized", sealed=sealed)
            )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return None  # a concurrent callback with the same state got it first
        return row

    async def redeem(
        self, org_id: str, user: str, key: str
    ) -> tuple[AuthorizationCodeResult, AuthorizationRequest] | None:
        """The code of this user's authorized (and not yet used) authorization of the server, once."""
        row = await self._latest(org_id, user, key, "authorized")
        if row is None:
            return None
        from mcp.shared.auth import AuthorizationCodeResult

        from hatchway.credentials.consent import AuthorizationRequest

        async with self.db.session() as session:
            claimed = await session.execute(
                update(OAuthConsentRow)
                .where(OAuthConsentRow.id == row.id, OAuthConsentRow.status == "authorized")
                .values(status="used")
            )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            return None
        payload = orjson.loads(await self.vault.open_blob(org_id, row.sealed, purpose=_CONSENT))
        request = AuthorizationRequest(
            url=payload["url"],
            state=payload["state"],
            code_verifier=payload["code_verifier"],
            redirect_uri=payload["redirect_uri"],
            issuer=payload.get("issuer"),
        )
        result = AuthorizationCodeResult(code=payload["code"], state=payload["state"], iss=payload.get("iss"))
        return result, request

    async def consent_server(self, row: OAuthConsentRow) -> dict[str, Any]:
        payload = orjson.loads(await self.vault.open_blob(row.org_id, row.sealed, purpose=_CONSENT))
        return dict(payload["server"])

    # -- connections -----------------------------------------------------------------------------

    async def connections(self, org_id: str, user: str | None, *, limit: int = 1000) -> list[Connection]:
        """One end user's connections, or (``user`` None) the organisation's, at most ``limit``."""
        query = select(UserGrantRow).where(UserGrantRow.org_id == org_id)
        if user is not None:
            query = query.where(UserGrantRow.end_user == user)
        query = query.order_by(UserGrantRow.end_user, UserGrantRow.server_id).limit(limit)
        async with self.db.session() as session:
            rows = (await session.execute(query)).scalars()
            return [
                Connection(
                    user=row.end_user,
                    server=row.server_id,
                    server_url=row.server_url,
                    scopes=(row.scopes or "").split(),
                    expires_at=row.expires_at,
                    connected_at=row.created_at,
                    updated_at=row.updated_at,
                )
                for row in rows
            ]

    async def grant_version(self, org_id: str, user: str, server: Any) -> str | None:
        """Which grant of this user's for ``server`` is current (when it was made), None when the
        user has none: what a cached result of theirs is filed under, so a revoked connection's
        results are never served again (``tool_result_key``), here or on any replica."""
        async with self.db.session() as session:
            created = await session.scalar(
                select(UserGrantRow.created_at).where(
                    UserGrantRow.org_id == org_id,
                    UserGrantRow.end_user == user,
                    UserGrantRow.server_key == server_key(server),
                )
            )
        return created.isoformat() if created is not None else None

    async def revoke(self, org_id: str, user: str, server_id: str) -> int:
        """Forget this user's grants of the server (by its id in the plugin); how many were removed."""
        async with self.db.session() as session:
            removed = await session.execute(
                delete(UserGrantRow).where(
                    UserGrantRow.org_id == org_id,
                    UserGrantRow.end_user == user,
                    UserGrantRow.server_id == server_id,
                )
            )
        self._flows = OrderedDict((k, v) for k, v in self._flows.items() if k[:2] != (org_id, user))
        return int(removed.rowcount or 0)  # type: ignore[attr-defined]
