"""Which of the operator's ``limits:`` apply to a request: its scopes (end user, agent, API key,
organisation) and the amounts each sets (docs/limits.md, "Scopes and precedence").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hatchway.config.settings import LimitsSettings, LimitValues
from hatchway.principal import Principal

Kind = Literal[
    "requests_per_minute",
    "tokens_per_minute",
    "concurrent_runs",
    "concurrent_background_runs",
    "budget_usd_per_day",
    "budget_usd_per_month",
]
KINDS: tuple[Kind, ...] = get_args(Kind)
BYTES_PER_TOKEN = 4
"""A request's input tokens are estimated from its body size before the call (then counted)."""


@dataclass(frozen=True, slots=True)
class Requester:
    """Who a request is from and what it asks for: what decides which limits apply."""

    principal: Principal
    user: str | None = None
    """``X-On-Behalf-Of``."""
    agent: str | None = None
    """The agent's name, for a request to ``agent:<name>``."""
    background: bool = False
    """A background response (``concurrent_background_runs`` applies)."""

    @classmethod
    def of(cls, principal: Principal, user: str | None, model: str, *, background: bool = False) -> Requester:
        agent = model.removeprefix("agent:") if model.startswith("agent:") else None
        return cls(principal, user, agent, bool(background))


@dataclass(frozen=True, slots=True)
class AppliedLimit:
    """One limit of ``limits:`` as it applies to one request."""

    kind: Kind
    amount: float
    """A count, or USD for a budget."""
    param: str
    """Where it is set: ``limits.keys.<name>.requests_per_minute``."""
    subject: str
    """Whose count it is: ``org:<id>``, ``key:<id>``, ``user:<org id>:<user>``, ``agent:<org id>:<name>``."""
    org_id: str = ""
    group: str | None = None
    """Whose records a budget sums, as ``GET /v1/usage`` groups them: ``key``, ``user``, ``agent``
    (with ``name``), or None for the whole organisation."""
    name: str | None = None


def applied_limits(settings: LimitsSettings, who: Requester) -> list[AppliedLimit]:
    """Every limit that applies to ``who``, the narrowest scope first (end user, agent, key, organisation).

    The narrowest first: a refusal names the narrowest limit that refuses (a refused request is
    counted in none, so one key at its limit does not eat its organisation's allowance).
    """
    org = who.principal
    out: list[AppliedLimit] = []
    if who.user is not None:
        out += _entry(
            settings.users,
            [who.user],
            "limits.users",
            f"user:{org.org_id}:{who.user}",
            org.org_id,
            ("user", who.user),
        )
    if who.agent is not None:
        out += _entry(
            settings.agents,
            [who.agent],
            "limits.agents",
            f"agent:{org.org_id}:{who.agent}",
            org.org_id,
            ("agent", who.agent),
        )
    if org.key_id is not None:
        names = [n for n in (org.key_name, org.key_id) if n]
        out += _entry(
            settings.keys, names, "limits.keys", f"key:{org.key_id}", org.org_id, ("key", org.key_id)
        )
    out += _organisation(settings, org)
    return out if who.background else [a for a in out if a.kind != "concurrent_background_runs"]


def _entry(
    table: dict[str, LimitValues],
    names: list[str],
    path: str,
    subject: str,
    org_id: str,
    group: tuple[str, str],
) -> list[AppliedLimit]:
    name = next((n for n in names if n in table), "*" if "*" in table else None)
    if name is None:
        return []
    return [
        AppliedLimit(kind, amount, f"{path}.{name}.{kind}", subject, org_id, *group)
        for kind in KINDS
        if (amount := getattr(table[name], kind)) is not None
    ]


def _organisation(settings: LimitsSettings, org: Principal) -> list[AppliedLimit]:
    name = next((n for n in (org.org_name, org.org_id) if n in settings.organisations), None)
    own = settings.organisations[name] if name is not None else LimitValues()
    out = []
    subject = f"org:{org.org_id}"
    for kind in KINDS:  # an organisation's entry overrides the defaults key by key
        if (amount := getattr(own, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.organisations.{name}.{kind}", subject, org.org_id))
        elif (amount := getattr(settings.defaults, kind)) is not None:
            out.append(AppliedLimit(kind, amount, f"limits.defaults.{kind}", subject, org.org_id))
    return out


def configured(settings: LimitsSettings) -> bool:
    """Whether any limit is set at all (when none is, admission costs nothing)."""
    tables = [settings.defaults, *settings.organisations.values(), *settings.keys.values()]
    tables += [*settings.users.values(), *settings.agents.values()]
    return any(getattr(values, kind) is not None for values in tables for kind in KINDS)


def reserved_tokens(max_tokens: Any, body_bytes: int) -> int:
    """What a request reserves of a tokens-per-minute window before its call: its input estimated
    from the body size, plus the output it allows (``max_tokens``), when it says."""
    return max(1, input_tokens(body_bytes) + (output_tokens(max_tokens) or 0))


def input_tokens(body_bytes: int) -> int:
    """A request's input estimated from its body's size."""
    return math.ceil(body_bytes / BYTES_PER_TOKEN)


def output_tokens(max_tokens: Any) -> int | None:
    """The output a request allows (``max_tokens``), or None when it does not say."""
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        return max(max_tokens, 0)
    return None


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a run's first model call may cost, to hold in its budgets while it runs (``Limiter.admit``):
    priced when a budget applies, never otherwise."""

    model: str
    """The model the request names (``agent:<name>`` is its agent's)."""
    input_tokens: int
    output_tokens: int | None
    """Its ``max_tokens``; None: ``limits.budget_hold_output_tokens``."""

    @classmethod
    def of(cls, model: str, max_tokens: Any, body_bytes: int) -> CostEstimate:
        return cls(model, input_tokens(body_bytes), output_tokens(max_tokens))
