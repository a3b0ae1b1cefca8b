"""DPoP (RFC 9449, MCP SEP-1932): tokens bound to a key the client holds, proven on every request.

A ``DpopKey`` is one EC P-256 key per client connection (per end user's grant of a server, kept
sealed with the grant so every replica proves with the same key), never one per request. Each
request to the token endpoint or to the MCP server carries a fresh proof: a JWT of type
``dpop+jwt``, signed ES256 with the public key in its header, whose claims are a new ``jti``, the
request's method (``htm``) and URL without query or fragment (``htu``), ``iat``, and, at the MCP
server, ``ath`` (the SHA-256 of the access token it accompanies). A server may ask for a nonce
(``use_dpop_nonce`` with a ``DPoP-Nonce`` header): the request is sent again, once, with a new
proof that carries it, and later proofs to that server carry the latest nonce it gave.

The proof is signed by PyJWT over ``cryptography``'s key; nothing here writes JWS by hand.
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from typing import Any

import httpx2
import orjson

PROOF_TYPE = "dpop+jwt"
NONCE_HEADER = "DPoP-Nonce"
MAX_NONCE_RETRIES = 1
"""How many times one request is sent again with a server's new nonce; a server that keeps asking
gets its last answer passed on (no loop)."""


def access_token_hash(token: str) -> str:
    """The ``ath`` claim: base64url (unpadded) of the SHA-256 of the token's ASCII bytes."""
    digest = hashlib.sha256(token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def target_uri(request: httpx2.Request) -> str:
    """The ``htu`` of ``request``: scheme, host (as its Host header names it) and path, no query.

    The Host header, not the URL: the egress guard may aim a request's URL at the address it
    checked, while the request (and so its proof) is still for the host the server is known by.
    """
    url = request.url
    host = request.headers.get("host") or url.netloc.decode("ascii")
    return f"{url.scheme}://{host}{url.path}"


def _origin(request: httpx2.Request) -> str:
    """Whose nonce a request carries: each server (authorization or resource) keeps its own."""
    host = request.headers.get("host") or request.url.netloc.decode("ascii")
    return f"{request.url.scheme}://{host}"


class DpopKey:
    """One client's DPoP key pair: signs the proofs, and remembers each server's latest nonce."""

    def __init__(self, private_key: Any = None) -> None:
        from cryptography.hazmat.primitives.asymmetric import ec
        from jwt.algorithms import ECAlgorithm

        self._key = private_key if private_key is not None else ec.generate_private_key(ec.SECP256R1())
        if not isinstance(self._key, ec.EllipticCurvePrivateKey) or not isinstance(
            self._key.curve, ec.SECP256R1
        ):
            raise ValueError("a DPoP key must be an EC P-256 private key")
        self.public_jwk: dict[str, str] = ECAlgorithm.to_jwk(self._key.public_key(), as_dict=True)  # type: ignore[assignment]
        self.nonces: dict[str, str] = {}
        """The latest ``DPoP-Nonce`` each origin sent, put in the next proof to it."""

    @classmethod
    def from_pem(cls, pem: str) -> DpopKey:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        return cls(load_pem_private_key(pem.encode(), password=None))

    def to_pem(self) -> str:
        """The private key, PKCS#8 PEM: stored only sealed, with the grant it proves."""
        from cryptography.hazmat.primitives import serialization

        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")

    def thumbprint(self) -> str:
        """The RFC 7638 SHA-256 thumbprint of the public key (what a bound token's ``cnf.jkt`` names)."""
        members = {name: self.public_jwk[name] for name in ("crv", "kty", "x", "y")}
        digest = hashlib.sha256(orjson.dumps(members, option=orjson.OPT_SORT_KEYS)).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def proof(
        self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None
    ) -> str:
        """A fresh proof for one request: ``method`` and ``url`` (no query or fragment)."""
        import jwt

        claims: dict[str, Any] = {
            "jti": uuid.uuid4().hex,
            "htm": method.upper(),
            "htu": url.split("?", 1)[0].split("#", 1)[0],
            "iat": int(time.time()),
        }
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        headers = {"typ": PROOF_TYPE, "jwk": self.public_jwk}
        return jwt.encode(claims, self._key, algorithm="ES256", headers=headers)

    def sign(self, request: httpx2.Request, *, access_token: str | None = None) -> None:
        """Put a fresh proof for ``request`` in its ``DPoP`` header (replacing an older one)."""
        nonce = self.nonces.get(_origin(request))
        request.headers["DPoP"] = self.proof(
            request.method, target_uri(request), access_token=access_token, nonce=nonce
        )

    def learn_nonce(self, request: httpx2.Request, response: httpx2.Response) -> bool:
        """Keep the nonce ``response`` gives for its server; True when it asks to send again with it
        (``use_dpop_nonce``: a 400 from a token endpoint, a 401 challenge from a resource)."""
        nonce = response.headers.get(NONCE_HEADER)
        if not nonce:
            return False
        self.nonces[_origin(request)] = nonce
        if response.status_code == 401:
            return "use_dpop_nonce" in response.headers.get("www-authenticate", "")
        if response.status_code == 400:
            return _oauth_error(response) == "use_dpop_nonce"
        return False


def _oauth_error(response: httpx2.Response) -> str | None:
    try:
        data = orjson.loads(response.content)
    except (orjson.JSONDecodeError, httpx2.ResponseNotRead):
        return None
    return data.get("error") if isinstance(data, dict) else None
