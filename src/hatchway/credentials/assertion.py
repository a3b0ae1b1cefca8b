"""RFC 7523 client assertions: how a client proves who it is with a private key instead of a secret.

The assertion is a short-lived JWT with ``iss = sub = client_id``, ``aud`` = the authorization
server (its token endpoint by default), a fresh ``jti`` and ``exp`` a minute away, signed ES256
(EC P-256 keys) or RS256 (RSA keys). The algorithm follows from the key, so a configuration cannot
pair a key with an algorithm it does not fit. The key never leaves the process.
"""

from __future__ import annotations

import time
import uuid

from hatchway.errors import McpAuthError

# PyJWT and the asymmetric-key parts of cryptography are imported by the functions that use them:
# only servers with private_key_jwt need them, and the serving process stays ~9 MiB smaller without.

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
LIFETIME_SECONDS = 60
_MIN_RSA_BITS = 2048


def signing_algorithm(private_key_pem: str) -> tuple[str, object]:
    """(``ES256`` | ``RS256``, the loaded key); McpAuthError naming the problem, never the key."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise McpAuthError(
            "the private key is not an unencrypted PEM private key (PKCS#8 or traditional)",
            code="oauth_bad_private_key",
        ) from None
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256", key
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= _MIN_RSA_BITS:
        return "RS256", key
    raise McpAuthError(
        "the private key must be EC P-256 (ES256) or RSA of at least 2048 bits (RS256)",
        code="oauth_bad_private_key",
    )


def sign_assertion(
    private_key_pem: str,
    *,
    client_id: str,
    audience: str,
    kid: str | None = None,
    now: float | None = None,
) -> str:
    """A signed ``private_key_jwt`` client assertion for one token request."""
    import jwt

    algorithm, key = signing_algorithm(private_key_pem)
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "jti": uuid.uuid4().hex,
        "iat": issued,
        "exp": issued + LIFETIME_SECONDS,
    }
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)  # type: ignore[arg-type]
