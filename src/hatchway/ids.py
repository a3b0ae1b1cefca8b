"""Prefixed, time-ordered identifiers (``resp_…``, ``log_…``): sortable, so cursors are plain ids."""

from __future__ import annotations

import base64
import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())
"""RFC 4648's base32 alphabet to Crockford's, index for index (the encoding done in C)."""


def _b32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """``prefix_`` + 10 chars of millisecond time + 16 random chars (ULID layout)."""
    millis = time.time_ns() // 1_000_000
    # 80 random bits are exactly 16 base32 characters: no padding, so base64's C encoder does it.
    random_part = base64.b32encode(os.urandom(10)).translate(_CROCKFORD).decode()
    return f"{prefix}_{_b32(millis, 10)}{random_part}"
