"""What is recorded: an ``AuditEvent`` in, an ``AuditEntry`` (the event placed in its chain) out.

A secret's value is never recorded. ``secret.put`` records the secret's name (``target``) and at
most its ``allowed_hosts`` in ``detail``; ``check_detail`` refuses, as a bug of the caller, a detail
with a key that reads like a credential (its words include ``value``, ``secret``, ``token``,
``password``…, at any depth), and a detail too large to be the small summary it should be. The
guard reads key names only: a value put under an innocent key is the caller's to avoid.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from hatchway.audit.chain import format_time
from hatchway.errors import InternalError
from hatchway.store.columns import clean_json

Outcome = Literal["success", "denied", "failure"]
OUTCOMES: tuple[Outcome, ...] = ("success", "denied", "failure")
MAX_DETAIL_BYTES = 8 * 1024
"""A detail says what changed (a name, a role, a limit's numbers), never a payload."""
SECRET_WORDS = frozenset(
    {
        "value",
        "values",
        "secret",
        "secrets",
        "token",
        "password",
        "passwd",
        "passphrase",
        "credential",
        "credentials",
        "authorization",
        "cookie",
    }
)
"""Words of a detail key that name a credential. ``tokens`` (a count: ``tokens_per_minute``) is not
one of them."""
_SECRET_PAIRS = frozenset({"apikey", "privatekey"})
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SEPARATORS = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """An action to record; ``org_id`` names the chain it joins."""

    org_id: str
    actor: str
    """``key:<key id>``, ``sso:<subject>``, ``cli:<os user>`` or ``system`` (``Principal.actor``)."""
    action: str
    """``key.create``, ``secret.put``, ``limit.set``, ``access.denied``…"""
    target: str
    """The object acted on: a key id, a secret's name, a tool, an operation id."""
    outcome: Outcome = "success"
    source: str | None = None
    """The client's address, when the action came over HTTP."""
    request_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    """A small JSON object of what changed; never a secret value (see the module's docstring)."""


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """A recorded event at its place in its organisation's chain."""

    org_id: str
    seq: int
    at: datetime
    actor: str
    action: str
    target: str
    outcome: str
    source: str | None
    request_id: str | None
    detail: dict[str, Any]
    prev_hash: str
    hash: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: what is exported, logged and hashed (every field but ``hash``)."""
        return {
            "org_id": self.org_id,
            "seq": self.seq,
            "at": format_time(self.at),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "outcome": self.outcome,
            "source": self.source,
            "request_id": self.request_id,
            "detail": self.detail,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


def _words(key: str) -> list[str]:
    return [w for w in _SEPARATORS.split(_CAMEL.sub(r"\1_\2", key).lower()) if w]


def secret_like(key: str) -> bool:
    """Whether a detail key reads like it holds a credential (``value``, ``access_token``, ``apiKey``)."""
    words = _words(key)
    pairs = {a + b for a, b in itertools.pairwise(words)}
    return bool(SECRET_WORDS.intersection(words) or _SECRET_PAIRS.intersection(pairs | set(words)))


def _refused_key(value: Any, path: str) -> str | None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            here = f"{path}.{key}"
            if secret_like(str(key)):
                return here
            if found := _refused_key(item, here):
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if found := _refused_key(item, f"{path}[{index}]"):
                return found
    return None


def check_detail(event: AuditEvent) -> dict[str, Any]:
    """The event's detail as it will be stored and hashed (JSON values only, each backend's text).

    Raises:
        InternalError: the detail has a credential-like key or the outcome is unknown: a bug of the
            caller, which must not record it. A detail over ``MAX_DETAIL_BYTES`` is replaced by
            ``{"truncated": true, "detail_bytes": n}``.
    """
    if event.outcome not in OUTCOMES:
        raise InternalError(f"audit event {event.action}: outcome must be one of {', '.join(OUTCOMES)}")
    if refused := _refused_key(event.detail, "detail"):
        raise InternalError(
            f"audit event {event.action}: {refused} looks like a secret; the audit trail never records "
            "one (record the secret's name, not its value)"
        )
    # Through JSON and back: what the database returns is exactly what was hashed.
    text = json.dumps(clean_json(dict(event.detail)), ensure_ascii=False, allow_nan=False)
    if len(text.encode()) > MAX_DETAIL_BYTES:
        # Cut, not refused: a change too big to describe is still recorded (its action and target).
        return {"truncated": True, "detail_bytes": len(text.encode())}
    return json.loads(text)
