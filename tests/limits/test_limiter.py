"""Which limits of ``limits:`` apply to a request, and the in-process limiter's counts."""

from __future__ import annotations

import pytest

from hatchway.config.settings import LimitsSettings
from hatchway.errors import ConcurrencyLimited, TokensLimited
from hatchway.limits.limiter import Limiter, duration
from hatchway.limits.scopes import Requester, applied_limits, reserved_tokens
from hatchway.principal import Principal

ACME = Principal(org_id="org_1", org_name="acme", key_id="key_1", key_name="ci")


def _limits(**config: object) -> LimitsSettings:
    return LimitsSettings.model_validate(config)


def test_every_scope_applies_the_narrowest_first() -> None:
    settings = _limits(
        defaults={"requests_per_minute": 100, "concurrent_runs": 5},
        organisations={"acme": {"requests_per_minute": 300}},
        keys={"*": {"requests_per_minute": 50}, "ci": {"requests_per_minute": 10}},
        users={"*": {"requests_per_minute": 5}},
        agents={"research": {"tokens_per_minute": 1000}},
    )
    who = Requester.of(ACME, "alice", "agent:research")
    assert [(a.param, a.subject) for a in applied_limits(settings, who)] == [
        ("limits.users.*.requests_per_minute", "user:org_1:alice"),
        ("limits.agents.research.tokens_per_minute", "agent:org_1:research"),
        ("limits.keys.ci.requests_per_minute", "key:key_1"),
        ("limits.organisations.acme.requests_per_minute", "org:org_1"),
        ("limits.defaults.concurrent_runs", "org:org_1"),  # the organisation's entry overrides key by key
    ]


def test_scopes_without_an_entry_or_a_request_for_them_do_not_apply() -> None:
    settings = _limits(users={"bob": {"requests_per_minute": 1}}, agents={"*": {"concurrent_runs": 1}})
    assert applied_limits(settings, Requester.of(ACME, "alice", "gpt-4o")) == []


def test_a_reservation_is_the_input_estimate_plus_max_tokens() -> None:
    assert reserved_tokens(None, 400) == 100
    assert reserved_tokens(50, 400) == 150
    assert reserved_tokens(True, 4) == 1  # not a number of tokens
    assert [duration(0.02), duration(17.2), duration(60)] == ["20ms", "17s", "1m0s"]


@pytest.mark.anyio
async def test_a_concurrency_slot_is_given_back_when_the_run_settles() -> None:
    limiter = Limiter(_limits(keys={"*": {"concurrent_runs": 1}}))
    who = Requester(ACME)
    first = await limiter.admit(who)
    with pytest.raises(ConcurrencyLimited) as refused:
        await limiter.admit(who)
    assert refused.value.param == "limits.keys.*.concurrent_runs"
    await limiter.settle(first, used_tokens=0)
    await limiter.settle(await limiter.admit(who), used_tokens=0)
    await limiter.close()


@pytest.mark.anyio
async def test_tokens_used_past_the_reservation_are_counted_after_the_run() -> None:
    limiter = Limiter(_limits(defaults={"tokens_per_minute": 100}))
    who = Requester(ACME)
    admission = await limiter.admit(who, reserve_tokens=10)
    assert admission.headers["x-ratelimit-remaining-tokens"] == "90"
    await limiter.settle(admission, used_tokens=70)  # 60 past the reservation
    with pytest.raises(TokensLimited) as refused:
        await limiter.admit(who, reserve_tokens=40)
    assert refused.value.code == "tokens_limit_exceeded"
    assert int(refused.value.headers["retry-after"]) >= 1
    await limiter.settle(await limiter.admit(who, reserve_tokens=30), used_tokens=0)  # exactly fits
    await limiter.close()


@pytest.mark.anyio
async def test_a_reservation_not_used_is_given_back_and_a_refused_request_counts_nowhere() -> None:
    limiter = Limiter(_limits(defaults={"tokens_per_minute": 100}, keys={"*": {"tokens_per_minute": 50}}))
    who = Requester(ACME)
    admission = await limiter.admit(who, reserve_tokens=45)
    assert admission.headers["x-ratelimit-remaining-tokens"] == "5"  # the key's, the tightest
    await limiter.settle(admission, used_tokens=5)
    with pytest.raises(TokensLimited) as refused:
        await limiter.admit(who, reserve_tokens=46)  # 5 + 46 > 50 for the key
    assert refused.value.param == "limits.keys.*.tokens_per_minute"
    assert refused.value.headers["x-ratelimit-remaining-tokens"] == "45"
    other_key = Requester(Principal(org_id="org_1", org_name="acme", key_id="key_2", key_name="cd"))
    # The organisation counted the 5 used, not the refused 46: 5 + 50 fits its 100 (the new key's 50 too).
    await limiter.settle(await limiter.admit(other_key, reserve_tokens=50), used_tokens=50)
    await limiter.close()
