"""Approval conditions (``config/conditions.py``) and the rule an operation waits for
(``engine/tools/operations/approvals.approval_for``)."""

from __future__ import annotations

from hatchway.config.agent_files import ResolvedPolicy
from hatchway.config.agents import ApprovalRule, OperationType
from hatchway.config.conditions import evaluate, problem_of
from hatchway.engine.tools.operations.approvals import approval_for, rule_variables
from tests.support.operations import make_ctx


def test_a_condition_that_cannot_be_evaluated_is_none() -> None:
    assert evaluate("arguments.amount > 500", {"arguments": {"amount": 501}}) is True
    assert evaluate("arguments.amount > 500", {"arguments": {"amount": 499.5}}) is False
    assert evaluate("arguments.amount > 500", {"arguments": {}}) is None  # absent
    assert evaluate("arguments.amount > 500", {"arguments": {"amount": "lots"}}) is None
    assert evaluate("arguments.urgent", {"arguments": {"urgent": "yes"}}) is None  # not a boolean


def test_a_condition_is_checked_over_the_declared_arguments() -> None:
    types = {"amount": "number", "orders": "array"}
    assert problem_of("arguments.amount > 500 && size(arguments.orders) > 2", types) is None
    assert problem_of("items.exists(i, i.value > 1000) || tainted", types) is None
    assert "not a valid CEL expression" in (problem_of("arguments.amount >", types) or "")
    assert "'amont' is not an argument" in (problem_of("arguments.amont > 1", types) or "")
    assert "Undefined variable" in (problem_of("total > 1", types) or "")
    assert "must be true or false" in (problem_of("arguments.amount + 1.0", types) or "")


def _policy(*rules: dict[str, object]) -> ResolvedPolicy:
    return ResolvedPolicy(
        tool="pay",
        operation_type=OperationType.TRANSACTIONAL,
        require_confirmation=False,
        approvals=tuple(ApprovalRule.model_validate(r) for r in rules),
    )


def test_the_first_rule_that_holds_decides_and_tainted_reads_the_run() -> None:
    policy = _policy(
        {"name": "tainted_run", "when": "tainted", "approvers": {"group": "security"}},
        {"name": "big", "when": "arguments.amount > 500", "approvers": {"role": "admin"}, "required": 2},
        {"approvers": {"end_user": True}},
    )
    ctx = make_ctx()
    small = approval_for(policy, rule_variables({"amount": 5}, [], "pay", ctx), ctx)
    assert small is None  # the end user's rule: no approval, the end user confirms
    big = approval_for(policy, rule_variables({"amount": 900}, [], "pay", ctx), ctx)
    assert big is not None and big["rule"] == "big" and big["required"] == 2
    assert big["approvers"] == {"role": "admin"} and big["tainted_by"] == []
    ctx.run.root.tainted_by.append("read_mail")
    tainted = approval_for(policy, rule_variables({"amount": 5}, [], "pay", ctx), ctx)
    assert tainted is not None and tainted["rule"] == "tainted_run" and tainted["tainted_by"] == ["read_mail"]


def test_guards_route_a_tainted_call_the_end_user_would_have_confirmed() -> None:
    policy = _policy({"when": "arguments.amount > 500", "approvers": {"group": "finance"}})
    ctx = make_ctx()
    ctx.run.root.tainted_approvers = {"group": "security"}
    assert approval_for(policy, rule_variables({"amount": 5}, [], "pay", ctx), ctx) is None  # untainted
    ctx.run.root.tainted_by.append("web_fetch")
    routed = approval_for(policy, rule_variables({"amount": 5}, [], "pay", ctx), ctx)
    assert routed is not None and routed["approvers"] == {"group": "security"}
    assert routed["source"] == "guards.confirm_when_tainted"
    # a rule of the tool's own that holds keeps its approvers
    own = approval_for(policy, rule_variables({"amount": 900}, [], "pay", ctx), ctx)
    assert own is not None and own["approvers"] == {"group": "finance"}


def test_a_condition_the_model_breaks_never_picks_the_lighter_rule() -> None:
    policy = _policy(
        {"name": "small", "when": "arguments.amount <= 100", "approvers": {"end_user": True}},
        {"name": "urgent", "when": "arguments.urgent", "approvers": {"group": "treasury"}},
        {"name": "large", "approvers": {"group": "supervisors"}},
    )
    ctx = make_ctx()
    assert approval_for(policy, rule_variables({"amount": 5}, [], "pay", ctx), ctx) is None
    broken = approval_for(policy, rule_variables({"amount": "5000", "urgent": "yes"}, [], "pay", ctx), ctx)
    assert broken is not None and broken["rule"] == "urgent"  # small did not hold, urgent could not say
    no = approval_for(policy, rule_variables({"amount": "5000", "urgent": False}, [], "pay", ctx), ctx)
    assert no is not None and no["rule"] == "large"
