"""Prefixed, time-ordered identifiers (``resp_…``, ``log_…``): sortable, so cursors are plain ids."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_PAIRS = [first + second for first in _ALPHABET for second in _ALPHABET]
"""The two characters of each 10-bit value."""
_RANDOM_BYTES = 10
"""80 bits: 16 characters."""
_BATCH = 64
"""Random parts drawn and encoded per ``os.urandom`` call."""

_random: Iterator[str] = iter(())


def _encoded(value: int, pairs: int) -> str:
    return "".join(_PAIRS[value >> shift & 1023] for shift in range(10 * (pairs - 1), -1, -10))


def _random_part() -> str:
    """16 characters of the OS's CSPRNG, drawn and encoded ``_BATCH`` at a time: a chat completion
    takes two ids, and a syscall and an encoding loop per id cost ~50 µs of its path on a VM whose
    caches went cold while the request waited for its upstream."""
    global _random
    part = next(_random, None)  # a list iterator's next is atomic (GIL): no two threads get one value
    if part is None:
        block = os.urandom(_BATCH * _RANDOM_BYTES)
        parts = [
            _encoded(int.from_bytes(block[i : i + _RANDOM_BYTES], "big"), 8)
            for i in range(0, len(block), _RANDOM_BYTES)
        ]
        part = parts.pop()  # taken before the others are shared: other threads may drain them first
        _random = iter(parts)
    return part


def _forget_random() -> None:
    global _random
    _random = iter(())  # a forked child must not hand out the parts its parent will


os.register_at_fork(after_in_child=_forget_random)


def new_id(prefix: str) -> str:
    """``prefix_`` + 10 chars of millisecond time + 16 random chars (ULID layout)."""
    millis, pairs = time.time_ns() // 1_000_000, _PAIRS
    return (
        f"{prefix}_{pairs[millis >> 40 & 1023]}{pairs[millis >> 30 & 1023]}{pairs[millis >> 20 & 1023]}"
        f"{pairs[millis >> 10 & 1023]}{pairs[millis & 1023]}{_random_part()}"
    )
