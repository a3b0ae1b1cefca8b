"""Verified end users: the app proves who its user is with a token from its own identity provider.

For an organisation listed in ``access.end_users[].organisations``, every request must carry the
user's JWT in the configured header (``X-Hatchway-User-Token`` by default). It is verified against
the provider's JWKS (``access/jwks.py``: issuer, audience, expiry with the configured leeway,
asymmetric algorithms only) and its subject becomes ``Principal.end_user``: the end user of
confirmations, per-user OAuth connections, limits and the run log. An ``X-On-Behalf-Of`` naming
anyone else is refused (``RunContext.from_headers``).

A verified token is remembered (by a keyed digest, never the token) until it expires or for
``VERIFIED_CACHE_SECONDS``, whichever is sooner, so a busy user's requests cost one dict lookup.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from hatchway.config.access import EndUserTokens
from hatchway.errors import AuthenticationError, PermissionDenied
from hatchway.principal import Principal, Role

if TYPE_CHECKING:
    import httpx

    from hatchway.access.jwks import KeySet

VERIFIED_CACHE_SECONDS = 60.0
VERIFIED_CACHE_ENTRIES = 10_000
MAX_SUBJECT_CHARS = 256
"""As ``X-On-Behalf-Of`` (``engine/context.py``)."""


class UserTokenRejected(AuthenticationError):
    """The end user's token is missing or not valid; the message names the header and the reason."""

    default_code = "invalid_user_token"


MAX_GROUPS = 1000
"""Groups read of one token's claim, in its order (directories commonly list hundreds; Entra ID sends
at most 200, and an overage claim beyond): approvals routed to a group see its members' groups whole."""


class EndUserVerifier:
    """Verifies the user tokens of the organisations one ``access.end_users`` entry covers."""

    def __init__(self, config: EndUserTokens, http: httpx.AsyncClient) -> None:
        from hatchway.access.jwks import KeySet

        self.config = config
        self.header = config.header.lower()
        self._keys: KeySet = KeySet(config.jwks_url, http)
        self._salt = secrets.token_bytes(16)
        self._verified: OrderedDict[bytes, tuple[float, str, tuple[str, ...]]] = OrderedDict()

    async def subject(self, headers: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
        """The verified subject of the request's user token and its groups (``groups_claim``, at most
        ``MAX_GROUPS``); UserTokenRejected otherwise."""
        token = headers.get(self.header)
        if not token:
            raise UserTokenRejected(
                f"{self.config.header}: required; this organisation accepts only verified end users "
                "(send the user's token from your identity provider)",
                param=self.config.header,
            )
        digest = hashlib.blake2b(token.encode(), key=self._salt, digest_size=32).digest()
        now = time.monotonic()
        cached = self._verified.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        from hatchway.access.jwks import TokenInvalid

        config = self.config
        try:
            claims = await self._keys.verify(
                token,
                issuer=config.issuer,
                audience=config.audience,
                algorithms=config.algorithms,
                leeway=config.leeway_seconds,
            )
        except TokenInvalid as exc:
            raise UserTokenRejected(
                f"{config.header}: the user token is not valid ({exc.reason})", param=config.header
            ) from None
        subject = claims.get(config.subject_claim)
        if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT_CHARS:
            raise UserTokenRejected(
                f"{config.header}: the user token has no usable {config.subject_claim!r} claim",
                param=config.header,
            )
        keep = min(VERIFIED_CACHE_SECONDS, float(claims["exp"]) + config.leeway_seconds - time.time())
        groups = _groups(claims.get(config.groups_claim))
        self._verified[digest] = (now + keep, subject, groups)
        self._verified.move_to_end(digest)
        while len(self._verified) > VERIFIED_CACHE_ENTRIES:
            self._verified.popitem(last=False)
        return subject, groups


class EndUsers:
    """Which organisations require verified end users, and their verifiers."""

    def __init__(self, entries: list[EndUserTokens], *, timeout: float = 10.0) -> None:
        self._http: httpx.AsyncClient | None = None
        self._verifiers: list[EndUserVerifier] = []
        if entries:  # httpx and PyJWT load only when some organisation verifies its end users
            import httpx

            self._http = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
            self._verifiers = [EndUserVerifier(entry, self._http) for entry in entries]
        self._by_org = {org: v for v in self._verifiers for org in v.config.organisations}

    def verifier(self, principal: Principal) -> EndUserVerifier | None:
        return self._by_org.get(principal.org_id) or self._by_org.get(principal.org_name)

    async def admit(self, principal: Principal, headers: Mapping[str, str]) -> Principal:
        """``principal`` with its verified end user when its organisation requires them; as is otherwise.

        In such an organisation an ``app`` key must send a valid user token with every request; an
        ``admin`` or ``viewer`` key may send none (the organisation's own reads) but then names no end
        user either. ``X-On-Behalf-Of`` naming anyone but the token's subject is refused.
        """
        verifier = self.verifier(principal)
        if verifier is None:
            return principal
        asserted = headers.get("x-on-behalf-of") or None
        principal = replace(principal, verified_end_users=True)
        if verifier.header not in headers and principal.role is not Role.APP:
            if asserted is not None:
                raise PermissionDenied(
                    f"X-On-Behalf-Of: this organisation accepts only verified end users; send the "
                    f"user's token in {verifier.config.header} instead",
                    param="X-On-Behalf-Of",
                    code="end_user_not_verified",
                )
            return principal
        subject, groups = await verifier.subject(headers)
        if asserted is not None and asserted != subject:
            raise PermissionDenied(
                "X-On-Behalf-Of: names another end user than the verified user token's subject",
                param="X-On-Behalf-Of",
                code="end_user_mismatch",
            )
        return replace(principal, end_user=subject, groups=groups)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()


def _groups(value: object) -> tuple[str, ...]:
    """A groups claim as a sorted tuple: a list of names, or one name (approvals routed to a group)."""
    names = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return tuple(sorted({g for g in names[:MAX_GROUPS] if isinstance(g, str) and 0 < len(g) <= 256}))
