"""What a run knows about who asked and under which limits; passed to every tool call.

A ``RunContext`` is built in one place, ``RunContext.from_headers`` (an HTTP request, or a queued
response's stored headers on a worker), and a subagent's from its parent's with ``child()``. Its
``run`` is the run-wide state (``RunState``): counters the loop keeps and the steps toolsets report
to the run log (``RunState.report``), linked to the parent run's state so a run tree can be totalled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from hatchway.engine.items import Usage
from hatchway.engine.run_log import ListToolsStep, ReportedStep, SideCallStep
from hatchway.errors import InvalidRequest
from hatchway.observability.log_redaction import SECRETS
from hatchway.principal import Principal, end_user_of
from hatchway.redaction import Redactor

MAX_ON_BEHALF_OF = 256
MAX_SESSION_KEY = 256


@dataclass(eq=False)
class Delegation:
    """What a whole run tree may still delegate: one per tree, on its root's state.

    Set by the first agent of the tree that delegates; an agent deeper in the tree may only lower it,
    so the tree's depth counts from its root whatever agents it passes through.
    """

    max_depth: int
    """The deepest level a child may be at (the root is 0)."""
    max_children: int
    children: int = 0
    """Children created so far, in the whole tree (each try of a child counts)."""

    def narrow(self, max_depth: int, max_children: int) -> None:
        self.max_depth = min(self.max_depth, max_depth)
        self.max_children = min(self.max_children, max_children)


@dataclass(eq=False)
class RunBudget:
    """What a whole run tree may spend (``agent.max_run_*``): one per tree, on its root's state,
    set by the first agent of the tree that has one and only lowered by agents deeper in it."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_tool_calls: int | None = None

    @property
    def empty(self) -> bool:
        return self.max_tokens is None and self.max_cost_usd is None and self.max_tool_calls is None

    def narrow(self, other: RunBudget) -> None:
        self.max_tokens = _lower(self.max_tokens, other.max_tokens)
        self.max_cost_usd = _lower(self.max_cost_usd, other.max_cost_usd)
        self.max_tool_calls = _lower(self.max_tool_calls, other.max_tool_calls)


@dataclass(frozen=True, slots=True)
class RunShare:
    """A subagent's part of its tree's budget, taken as it starts (``RunState.take_share``): what
    the room left was when it started, divided among the children its parent's round still had to
    start. Until the child ends, the part it has not used is held: no sibling can spend it."""

    tokens: int | None = None
    cost_usd: float | None = None


def _lower(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """Which budget of the tree is spent (or would be by the next round), for the run log."""

    budget: str
    """``tokens``, ``cost_usd`` or ``tool_calls``."""
    used: float
    limit: float


MAX_SIDE_STEPS = 100
"""Side-call steps one run's record keeps (``RunState.report``); the rest are counted only."""
S = TypeVar("S", bound=ReportedStep)


@dataclass(eq=False)
class RunState:
    """Run-wide state: what the loop counted and toolsets reported, for the run log and limits.

    A subagent's state is a child of its parent's (``children``), so what a whole run tree used is
    ``tree_usage()`` / ``tree_tool_calls()`` of its root.
    """

    parent: RunState | None = None
    usage: Usage = field(default_factory=Usage)
    """Tokens of this run's model calls (its children's are theirs)."""
    tool_calls: int = 0
    """Gateway tool calls this run made (client tool calls are the client's)."""
    round: int = 1
    """The round the run is in: the loop sets it as each round begins (a run without rounds, an
    MCP endpoint's call, is one). A listing reported now is of this round."""
    log: list[ReportedStep] = field(default_factory=list)
    """What the toolsets, guards and side calls reported (``report``), in the order reported: the
    run log's steps besides the loop's own (``engine/run_log.py``)."""
    side_calls: int = 0
    """The model calls this run made besides its rounds (the guards' classifier, an MCP server's
    sampling request); the ``log`` keeps the steps of the first ``MAX_SIDE_STEPS``."""
    side_usage: Usage = field(default_factory=Usage)
    """Tokens and cost of those calls: in this run's record and spend (also in ``usage``, which the
    limits and the run budget count), never in the ``usage`` the client is answered with."""
    children: list[RunState] = field(default_factory=list)
    call_occurrences: dict[str, int] = field(default_factory=dict)
    """How many times this run has called each MCP tool (by server and tool): which call of the run a
    task belongs to, so a response run again finds its open tasks (``mcp/task_calls.py``)."""
    delegation: Delegation | None = None
    """On the root's state only: what the tree may still delegate (``delegation_budget``)."""
    cost_usd: float = 0.0
    """What this run's model calls cost, where their price is known."""
    budget: RunBudget | None = None
    """On the root's state only: what the tree may spend (``run_budget``)."""
    budget_exhausted: BudgetSpent | None = None
    """Set when this run's last round ran without tools because the tree's budget was spent."""
    tainted_by: list[str] = field(default_factory=list)
    """On the root's state: the tools whose output entered the tree's context while a guard was on
    (``engine/guards``), oldest first."""
    confirm_when_tainted: bool = False
    """On the root's state: a transactional tool called once the tree is tainted asks the end user,
    whatever its policy says (``guards.confirm_when_tainted``)."""
    confirm_always: bool = False
    """On the root's state: a guard's ``confirm`` action fired; every transactional tool asks."""
    deadline_timer: asyncio.Timeout | None = None
    """The timer bounding this run's current step (``loop._before_deadline``), moved by
    ``RunContext.extend_deadline``."""
    tainted_approvers: dict[str, Any] | None = None
    """On the root's state: who approves a transactional call once the tree is tainted, instead of
    the end user (``guards.confirm_when_tainted: {group: …}``)."""
    record_id: str | None = None
    """The id of this run's record in the run log (set by its scope, ``engine/run.py``)."""
    share: RunShare | None = None
    """On a subagent's state, when the tree has a token or cost budget: its part of it."""
    ended: bool = False
    """Set when a subagent's run ended: its share is no longer held."""
    spawns_pending: int = 0
    """The subagents this run's current round has yet to start (set by the loop as the round's
    tools start): each takes an equal part of the room left, so the first cannot take it all."""

    def report(self, step: ReportedStep) -> None:
        """Add ``step`` to the run log. A listing is of the round the run is in; a side call's
        tokens count like a round's, in the run's tokens and spend."""
        if isinstance(step, ListToolsStep) and step.round is None:
            step = replace(step, round=self.round)
        elif isinstance(step, SideCallStep):
            self._count_side_call(step.usage)
            if self.side_calls > MAX_SIDE_STEPS:  # a server sampling all run long: counted, not kept
                return
        self.log.append(step)

    def reported(self, kind: type[S]) -> list[S]:
        """The steps of ``kind`` reported so far, in order."""
        return [step for step in self.log if isinstance(step, kind)]

    @property
    def dropped_headers(self) -> dict[str, list[str]]:
        """Server id → the ``forward_headers`` entries of its plugin that were dropped, not forwarded."""
        return {
            step.server: list(step.dropped_headers)
            for step in self.reported(ListToolsStep)
            if step.dropped_headers is not None
        }

    @property
    def side_calls_omitted(self) -> int:
        """Side calls past ``MAX_SIDE_STEPS``: counted in ``side_usage``, their steps not kept."""
        return max(self.side_calls - MAX_SIDE_STEPS, 0)

    def _count_side_call(self, usage: Usage | None) -> None:
        self.side_calls += 1
        if usage is not None:
            self.usage.add(usage)
            self.cost_usd += usage.cost_usd
            self.side_usage.add(usage)

    def child(self) -> RunState:
        state = RunState(parent=self)
        self.children.append(state)
        return state

    @property
    def root(self) -> RunState:
        state = self
        while state.parent is not None:
            state = state.parent
        return state

    def delegation_budget(self, max_depth: int, max_children: int) -> Delegation:
        """The tree's delegation budget, no looser than these limits (absolute depth, children)."""
        root = self.root
        if root.delegation is None:
            root.delegation = Delegation(max_depth, max_children)
        else:
            root.delegation.narrow(max_depth, max_children)
        return root.delegation

    def run_budget(self, limits: RunBudget | None) -> RunBudget | None:
        """The tree's budget, no looser than ``limits`` (None: this agent sets none)."""
        root = self.root
        if limits is not None and not limits.empty:
            if root.budget is None:
                root.budget = RunBudget(limits.max_tokens, limits.max_cost_usd, limits.max_tool_calls)
            else:
                root.budget.narrow(limits)
        return root.budget

    def budget_spent(self, *, next_tokens: int = 0, next_cost: float = 0.0) -> BudgetSpent | None:
        """The tree's budget that is spent, or that a next round costing this much would pass: the
        tree's own, or the share of it this run (or a run above it) took, less what the runs in
        progress elsewhere in the tree hold of theirs."""
        root = self.root
        budget = root.budget
        if budget is None:
            return None
        for scope, tokens, cost in self._scopes():
            if tokens is not None:
                used, held = scope.tree_usage().total_tokens, self._held(scope)[0]
                if used + held + next_tokens >= tokens:
                    return BudgetSpent("tokens", used, tokens)
            if cost is not None:
                spent, held_cost = scope.tree_cost(), self._held(scope)[1]
                if spent + held_cost + next_cost >= cost:
                    return BudgetSpent("cost_usd", round(spent, 6), cost)
        if budget.max_tool_calls is not None:
            calls = root.tree_tool_calls()
            if calls >= budget.max_tool_calls:
                return BudgetSpent("tool_calls", calls, budget.max_tool_calls)
        return None

    def token_room(self) -> int | None:
        """Tokens this run may still use: the least any budget above it leaves (the tree's, a
        share's), less what the runs in progress elsewhere hold; None when no token budget applies."""
        rooms = [
            limit - scope.tree_usage().total_tokens - self._held(scope)[0]
            for scope, limit, _cost in self._scopes()
            if limit is not None
        ]
        return min(rooms) if rooms else None

    def cost_room(self) -> float | None:
        """USD this run may still spend, as ``token_room`` counts tokens."""
        rooms = [
            limit - scope.tree_cost() - self._held(scope)[1]
            for scope, _tokens, limit in self._scopes()
            if limit is not None
        ]
        return min(rooms) if rooms else None

    def take_share(self) -> RunShare | None:
        """The part of the room left that a child this run starts may use: the room divided among
        the children the round has yet to start (the room is re-divided as each starts, so what
        one child leaves unused is the next ones'). None when the tree has no token or cost budget."""
        tokens, cost = self.token_room(), self.cost_room()
        if tokens is None and cost is None:
            return None
        parts = max(self.spawns_pending, 1)
        self.spawns_pending = max(self.spawns_pending - 1, 0)
        return RunShare(
            None if tokens is None else max(tokens, 0) // parts,
            None if cost is None else max(cost, 0.0) / parts,
        )

    def _scopes(self) -> list[tuple[RunState, int | None, float | None]]:
        """The budgets over this run: each share of it or of a run above it, then the tree's."""
        scopes: list[tuple[RunState, int | None, float | None]] = []
        state: RunState | None = self
        while state is not None:
            if state.share is not None:
                scopes.append((state, state.share.tokens, state.share.cost_usd))
            state = state.parent
        budget = self.root.budget
        if budget is not None:
            scopes.append((self.root, budget.max_tokens, budget.max_cost_usd))
        return scopes

    def _held(self, scope: RunState) -> tuple[int, float]:
        """Tokens and USD held under ``scope`` by runs in progress beside this one: the unused part
        of each share taken by a run that has not ended and is neither this run nor above it."""
        chain: set[int] = set()
        state: RunState | None = self
        while state is not None:
            chain.add(id(state))
            state = state.parent
        tokens, cost, pending = 0, 0.0, list(scope.children)
        while pending:
            state = pending.pop()
            if id(state) not in chain and state.share is not None and not state.ended:
                if state.share.tokens is not None:
                    tokens += max(state.share.tokens - state.tree_usage().total_tokens, 0)
                if state.share.cost_usd is not None:
                    cost += max(state.share.cost_usd - state.tree_cost(), 0.0)
                continue  # what runs below it hold is within its share
            pending.extend(state.children)
        return tokens, cost

    def tool_calls_left(self) -> int | None:
        """Gateway tool calls the tree's budget still allows (None: no such budget)."""
        root = self.root
        if root.budget is None or root.budget.max_tool_calls is None:
            return None
        return max(root.budget.max_tool_calls - root.tree_tool_calls(), 0)

    def tree_cost(self) -> float:
        return sum(state.cost_usd for state in self._tree())

    def tree_usage(self) -> Usage:
        total = Usage()
        for state in self._tree():
            total.add(state.usage)
        return total

    def tree_tool_calls(self) -> int:
        return sum(state.tool_calls for state in self._tree())

    def tree_records(self) -> list[str]:
        """The ids of the run log records of the tree (what ``tree_cost`` is the sum of)."""
        return [state.record_id for state in self._tree() if state.record_id is not None]

    def _tree(self) -> list[RunState]:
        states, pending = [], [self]
        while pending:
            state = pending.pop()
            states.append(state)
            pending.extend(state.children)
        return states


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
    secrets: Redactor = field(default_factory=Redactor)
    """Every secret value resolved during the run (over the gateway's provider keys, its ``base``):
    scrubbed, in every encoding, from anything stored or returned."""
    run: RunState = field(default_factory=RunState)
    waits_for_approval: bool = False
    """A background run: a call whose operation awaits approval waits for its approvers here
    (``operations.approval_wait_seconds``), and the run reports the outcome; otherwise the run
    answers at once that approval is pending."""

    @classmethod
    def from_headers(
        cls,
        principal: Principal,
        headers: Mapping[str, str],
        *,
        deadline_seconds: float,
        depth: int = 0,
        known_secrets: Redactor | None = None,
    ) -> RunContext:
        """The context of a request from its lower-cased headers; 400 for an oversized identity.

        ``known_secrets`` are values the gateway already holds (its provider keys): the run
        redacts them too."""
        # A verified end user (access/end_users.py, which refused any other X-On-Behalf-Of) is the
        # end user; otherwise the app's word.
        on_behalf_of = end_user_of(principal, headers)
        if on_behalf_of is not None and len(on_behalf_of) > MAX_ON_BEHALF_OF:
            raise InvalidRequest(
                f"X-On-Behalf-Of: at most {MAX_ON_BEHALF_OF} characters (got {len(on_behalf_of)})",
                param="X-On-Behalf-Of",
            )
        session_key = headers.get("hatchway-session") or None
        if session_key is not None and len(session_key) > MAX_SESSION_KEY:
            raise InvalidRequest(
                f"hatchway-session: at most {MAX_SESSION_KEY} characters (got {len(session_key)}); "
                "send a conversation id, not the conversation",
                param="hatchway-session",
            )
        return cls(
            principal=principal,
            request_headers=headers,
            on_behalf_of=on_behalf_of,
            session_key=session_key,
            deadline=time.monotonic() + deadline_seconds,
            depth=depth,
            secrets=Redactor(base=known_secrets),
        )

    def child(self) -> RunContext:
        """A subagent's context: the same caller, headers, deadline and secrets, one level deeper."""
        return RunContext(
            principal=self.principal,
            request_headers=self.request_headers,
            on_behalf_of=self.on_behalf_of,
            deadline=self.deadline,
            depth=self.depth + 1,
            secrets=self.secrets,
            run=self.run.child(),
            waits_for_approval=self.waits_for_approval,
        )

    @property
    def org_id(self) -> str:
        return self.principal.org_id

    def remaining(self) -> float:
        """Seconds left before the deadline (may be negative)."""
        return self.deadline - time.monotonic()

    def extend_deadline(self, seconds: float) -> None:
        """Move the deadline ``seconds`` later (earlier when negative): the time a call spends
        waiting for people (an approval) is not the run's. The current step's timer moves with it,
        unless it has fired already."""
        self.deadline += seconds
        timer = self.run.deadline_timer
        if timer is not None and not timer.expired():
            timer.reschedule(asyncio.get_running_loop().time() + max(self.remaining(), 0))

    @property
    def secret_values(self) -> set[str]:
        """The raw secret values this run redacts."""
        return self.secrets.values()

    def add_secret(self, value: str) -> None:
        """Remember a secret value the run resolved: scrubbed from what it stores or returns, and
        from third-party log lines (``observability/log_redaction.py``), in every encoding."""
        self.secrets.add(value)
        SECRETS.add(value)

    def redact(self, text: str) -> str:
        """``text`` with every known secret value, raw or encoded, replaced by ``[REDACTED]``."""
        return self.secrets.redact(text)

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value (a structured result) with every secret redacted from its strings."""
        return self.secrets.redact_value(value)
