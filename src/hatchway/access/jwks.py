"""An identity provider's published keys (JWKS), cached, and JWT verification against them (PyJWT).

Shared by the MCP endpoints in OAuth resource-server mode (``api/mcp_endpoints/oauth.py``) and the
verified end users (``access/end_users.py``). The key set is kept ``JWKS_TTL_SECONDS``; a token naming
an unknown key id refetches it at most every ``JWKS_REFETCH_SECONDS``, so a flood of forged key ids
costs the provider nothing; an answer over ``MAX_DOCUMENT_BYTES`` is refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
import jwt

JWKS_TTL_SECONDS = 300.0
JWKS_REFETCH_SECONDS = 30.0
MAX_DOCUMENT_BYTES = 256 * 1024


class TokenInvalid(Exception):
    """A token failed verification; ``reason`` says why (for the caller's message or the log)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def get_json(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
    """A JSON object from ``url``, read up to ``MAX_DOCUMENT_BYTES``; ValueError or httpx errors otherwise."""
    async with http.stream(method, url, **kwargs) as response:
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ValueError("answer too large")
    document = httpx.Response(200, content=bytes(body)).json()
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


class KeySet:
    """One provider's JWKS, fetched on first use and cached (see the module docstring)."""

    def __init__(self, url: str, http: httpx.AsyncClient) -> None:
        self.url = url
        self._http = http
        self._jwks: jwt.PyJWKSet | None = None
        self._jwks_at = 0.0
        self._jwks_failed = False
        self._lock = asyncio.Lock()

    async def verify(
        self,
        token: str,
        *,
        issuer: str,
        audience: str,
        algorithms: Sequence[str],
        leeway: float,
    ) -> dict[str, Any]:
        """The claims of ``token`` when its signature, issuer, audience and times hold; TokenInvalid."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"not a JWT ({type(exc).__name__})") from None
        if header.get("alg") not in algorithms:
            raise TokenInvalid(f"algorithm {header.get('alg')!r} not accepted")
        key = await self._key(str(header.get("kid") or ""))
        try:
            return jwt.decode(
                token,
                key.key,
                algorithms=list(algorithms),
                audience=audience,
                issuer=issuer,
                options={"require": ["exp", "iss", "aud"]},
                leeway=leeway,
            )
        except jwt.ExpiredSignatureError:
            raise TokenInvalid("expired") from None
        except jwt.InvalidAudienceError:
            raise TokenInvalid("issued for another audience") from None
        except jwt.InvalidIssuerError:
            raise TokenInvalid("issued by another issuer") from None
        except jwt.InvalidSignatureError:
            raise TokenInvalid("signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"{type(exc).__name__}: {exc}") from None

    async def _key(self, kid: str) -> jwt.PyJWK:
        key = _find(await self._key_set(refresh=False), kid)
        if key is None and time.monotonic() - self._jwks_at >= JWKS_REFETCH_SECONDS:
            key = _find(await self._key_set(refresh=True), kid)
        if key is None:
            raise TokenInvalid(f"signed with a key the provider does not publish ({kid!r})")
        return key

    async def _key_set(self, *, refresh: bool) -> jwt.PyJWKSet:
        async with self._lock:
            age = time.monotonic() - self._jwks_at
            if self._jwks is not None and age < JWKS_TTL_SECONDS and not refresh:
                return self._jwks
            if self._jwks is None and self._jwks_failed and age < JWKS_REFETCH_SECONDS:
                # Unreadable a moment ago: refuse at once rather than ask again for every token.
                raise TokenInvalid("the key set could not be read (retried every 30 s)")
            self._jwks_at = time.monotonic()
            try:
                self._jwks = jwt.PyJWKSet.from_dict(await get_json(self._http, "GET", self.url))
                self._jwks_failed = False
            except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
                self._jwks_failed = True
                if self._jwks is None:
                    raise TokenInvalid(f"the key set could not be read ({type(exc).__name__})") from None
            return self._jwks


def _find(keys: jwt.PyJWKSet, kid: str) -> jwt.PyJWK | None:
    for key in keys.keys:
        if key.key_id == kid or (not kid and len(keys.keys) == 1):
            return key
    return None
