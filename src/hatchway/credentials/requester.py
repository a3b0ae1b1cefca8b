"""Whom credentials are resolved for: an organisation, maybe an end user, and a sink for the secrets.

The credentials know nothing of runs. A caller says which organisation's vault to read, which end
user a per-user server is reached as, and where every secret value resolved on its behalf goes (a
vault secret, a private key, an access or refresh token) so that it scrubs them from whatever it
stores, returns or logs; the engine passes its run's ``add_secret``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SecretSink = Callable[[str], None]
"""Takes each secret value resolved for a requester (the engine's ``RunContext.add_secret``)."""


def _keep_none(_value: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Requester:
    """The organisation, the end user and the secret sink of one request for credentials."""

    org_id: str
    """Whose vault holds the secrets, and whose data key seals the cached tokens."""
    end_user: str | None = None
    """Who a per-user server (``grant: authorization_code``) is reached as; None: no end user."""
    add_secret: SecretSink = _keep_none
    deadline: float | None = None
    """``time.monotonic()`` after which the request is of no use (a token exchange stops there)."""

    def remaining(self) -> float | None:
        """Seconds left before ``deadline`` (may be negative); None without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()
