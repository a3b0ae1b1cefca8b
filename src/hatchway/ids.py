"""Prefixed, time-ordered identifiers (``resp_…``, ``log_…``): sortable, so cursors are plain ids."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """``prefix_`` + 10 chars of millisecond time + 16 random chars (ULID layout)."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_b32(millis, 10)}{_b32(int.from_bytes(os.urandom(10), 'big'), 16)}"
