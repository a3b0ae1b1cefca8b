"""What a run knows about who asked and under which limits; passed to every tool call."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hatchway.observability.log_redaction import SECRETS


@dataclass(slots=True)
class Principal:
    """The organisation and key behind a request."""

    org_id: str
    org_name: str
    key_id: str | None = None
    key_name: str | None = None


@dataclass
class RunContext:
    """Per-request facts shared by the loop and every toolset."""

    principal: Principal
    request_headers: Mapping[str, str] = field(default_factory=dict)
    """The client's request headers, lower-cased (forward_headers reads them each round)."""
    on_behalf_of: str | None = None
    session_key: str | None = None
    """Conversation key: ``hatchway-session`` for Chat, the response chain for Responses."""
    deadline: float = field(default_factory=lambda: time.monotonic() + 120.0)
    """``time.monotonic()`` value after which the loop stops with ``finish_reason: "timeout"``."""
    depth: int = 0
    """Subagent nesting depth (0 for a top-level request)."""
    response_id: str | None = None
    agent: str | None = None
    secret_values: set[str] = field(default_factory=set)
    """Every secret value resolved during the run; scrubbed from anything stored or returned."""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def org_id(self) -> str:
        return self.principal.org_id

    def remaining(self) -> float:
        """Seconds left before the deadline (may be negative)."""
        return self.deadline - time.monotonic()

    def add_secret(self, value: str) -> None:
        """Remember a secret value the run resolved: scrubbed from what it stores or returns, and
        from third-party log lines (``observability/log_redaction.py``)."""
        self.secret_values.add(value)
        SECRETS.add(value)

    def redact(self, text: str) -> str:
        """Replace every known secret value in ``text`` with ``[REDACTED]``."""
        for value in self.secret_values:
            if value and value in text:
                text = text.replace(value, "[REDACTED]")
        return text
