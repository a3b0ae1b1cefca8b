"""AES-256-GCM with associated data: the only cipher the vault uses.

A sealed blob is ``version byte || 12-byte random nonce || ciphertext+tag``. The associated data
binds a blob to where it belongs (organisation and secret name, or organisation for a data key),
so a row copied to another organisation or name fails to open instead of decrypting.

``cryptography`` is imported on the first seal or open, not with this module: its OpenSSL bindings
cost ~7 MiB of resident memory (``bench/profile_hot.py``), which a gateway that never touches a
secret, an OAuth token or a compaction blob need not carry.
"""

from __future__ import annotations

import os

from hatchway.errors import DecryptionError

FORMAT_V1 = b"\x01"
NONCE_BYTES = 12


def secret_aad(org_id: str, name: str) -> bytes:
    """Associated data of a secret value: its organisation and name."""
    return f"hatchway/secret/v1\0{org_id}\0{name}".encode()


def data_key_aad(org_id: str) -> bytes:
    """Associated data of an organisation's wrapped data key."""
    return f"hatchway/data-key/v1\0{org_id}".encode()


def blob_aad(org_id: str, purpose: str) -> bytes:
    """Associated data of an opaque blob an organisation's clients carry (e.g. a compaction)."""
    return f"hatchway/blob/v1\0{purpose}\0{org_id}".encode()


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """Encrypt and authenticate ``plaintext`` under ``key`` bound to ``aad``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(NONCE_BYTES)
    return FORMAT_V1 + nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_sealed(key: bytes, blob: bytes, aad: bytes, *, what: str) -> bytes:
    """Decrypt a sealed blob; DecryptionError (never garbage) when the key, data or binding is wrong."""
    if len(blob) < 1 + NONCE_BYTES + 16 or blob[:1] != FORMAT_V1:
        raise DecryptionError(f"{what}: the stored ciphertext is malformed")
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce, body = blob[1 : 1 + NONCE_BYTES], blob[1 + NONCE_BYTES :]
    try:
        return AESGCM(key).decrypt(nonce, body, aad)
    except InvalidTag:
        raise DecryptionError(
            f"{what}: cannot decrypt — the key does not match or the stored data was altered or moved"
        ) from None
