"""What a run's record says it did: one frozen type per kind of step, each serialised by its ``to_dict``.

The loop's own steps (``ModelCallStep``, ``ToolCallStep``, ``BudgetExhaustedStep``) are its
``RunResult.steps``; what the toolsets, guards and side calls find along the way they report to the
run (``RunState.report``), which knows the round the run is in. ``record_steps`` puts both in the
order the record keeps them. The JSON of each step is the run log's stored shape (``GET
/v1/logs/{id}``, ``hatchway logs --json``, the dashboard's waterfall).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from hatchway.engine.items import Usage


class Outcome(StrEnum):
    """How a step ended: the ``outcome`` of a tool call (its result's ``meta["outcome"]``), of a
    model call, a listing or a side call."""

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    TOOL_ERROR = "tool_error"
    """The tool ran and answered with an error (MCP ``isError``)."""
    INVALID_ARGUMENTS = "invalid_arguments"
    INPUT_REQUIRED = "input_required"
    """An MCP endpoint's call that relayed a question (an upstream's, or a confirmation) to its client."""
    # A transactional tool in the loop: what the operations service did with the call (``ResultKind``).
    EXECUTED = "executed"
    NEEDS_CONFIRMATION = "needs_confirmation"
    AWAITING_APPROVAL = "awaiting_approval"
    MISSING_ARGUMENTS = "missing_arguments"
    OUT_OF_SCOPE = "out_of_scope"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    INVALID = "invalid"
    # A transactional tool on an MCP endpoint: the operation's verdict (``VerdictStatus``).
    SUCCESS = "SUCCESS"
    PARTIAL_SUCCESS = "PARTIAL_SUCCESS"
    VERDICT_FAILED = "FAILED"
    # A guard classifier's judgement of a tool's output (a side call).
    SAFE = "safe"
    UNSAFE = "unsafe"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class StepTokens:
    """What a model call used, as a step records it."""

    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    """None when its price is unknown."""

    @classmethod
    def of(cls, usage: Usage) -> StepTokens:
        return cls(usage.prompt_tokens, usage.completion_tokens, usage.cost)


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """What a round's model call answered, beyond its tokens."""

    finish_reason: str
    tool_calls: tuple[str, ...] = ()
    """The names of the tools it called."""
    upstream_model: str | None = None
    priced_as: str | None = None
    served_by: str | None = None
    """The target that answered, for a model with several targets or fallbacks."""
    failed_attempts: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ModelCallStep:
    """One model call of a round (or a compaction's summariser); ``answer`` None: it had none."""

    kind: ClassVar[str] = "model_call"
    round: int
    started_at_ms: float
    duration_ms: float
    outcome: Outcome = Outcome.OK
    tokens: StepTokens | None = None
    answer: ModelAnswer | None = None

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {
            "type": self.kind,
            "round": self.round,
            "started_at_ms": self.started_at_ms,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome.value,
        }
        tokens, answer = self.tokens, self.answer
        if answer is not None and tokens is not None:
            step.update(
                finish_reason=answer.finish_reason,
                prompt_tokens=tokens.prompt_tokens,
                completion_tokens=tokens.completion_tokens,
                tool_calls=list(answer.tool_calls),
                upstream_model=answer.upstream_model,
                cost_usd=tokens.cost_usd,
                priced_as=answer.priced_as,
            )
            if answer.served_by is not None:
                step.update(
                    served_by=answer.served_by, failed_attempts=[dict(a) for a in answer.failed_attempts]
                )
        elif tokens is not None:
            step.update(
                prompt_tokens=tokens.prompt_tokens,
                completion_tokens=tokens.completion_tokens,
                cost_usd=tokens.cost_usd,
            )
        return step


@dataclass(frozen=True, slots=True)
class ToolCallStep:
    """One gateway tool call: in a round of the loop, or an MCP endpoint's ``tools/call``."""

    kind: ClassVar[str] = "tool_call"
    round: int
    call_id: str | None
    name: str
    """The name the model (or the endpoint's client) called."""
    server: str | None
    tool: str
    """The tool's own name on its server."""
    arguments: str
    """As recorded: redacted, and cut to a bound on an endpoint (``arguments_size``)."""
    duration_ms: float
    outcome: Outcome
    cached: bool = False
    retries: int = 0
    result_preview: str = ""
    arguments_size: tuple[int, str] | None = None
    """The arguments' full length and SHA-256 when ``arguments`` is cut."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The rest of the result's ``meta`` (``error_code``, ``started_at_ms``, ``guard``, operation…)."""

    @classmethod
    def of(
        cls,
        meta: Mapping[str, Any],
        *,
        round: int,
        call_id: str | None,
        name: str,
        arguments: str,
        duration_ms: float,
        is_error: bool,
        result_preview: str,
        arguments_size: tuple[int, str] | None = None,
    ) -> ToolCallStep:
        """The step of a call whose result carries ``meta``: server, tool, outcome, cached and
        retries are read from it, the rest kept as they are."""
        extra = dict(meta)
        return cls(
            round=round,
            call_id=call_id,
            name=name,
            server=extra.pop("server", None),
            tool=extra.pop("tool", name),
            arguments=arguments,
            duration_ms=duration_ms,
            outcome=Outcome(extra.pop("outcome", Outcome.ERROR if is_error else Outcome.OK)),
            cached=bool(extra.pop("cached", False)),
            retries=int(extra.pop("retries", 0)),
            result_preview=result_preview,
            arguments_size=arguments_size,
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {
            "type": self.kind,
            "round": self.round,
            "call_id": self.call_id,
            "name": self.name,
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
        }
        if self.arguments_size is not None:
            step.update(arguments_chars=self.arguments_size[0], arguments_sha256=self.arguments_size[1])
        step.update(
            duration_ms=self.duration_ms,
            outcome=self.outcome.value,
            cached=self.cached,
            retries=self.retries,
            result_preview=self.result_preview,
        )
        step.update(self.extra)
        return step


@dataclass(frozen=True, slots=True)
class BudgetExhaustedStep:
    """The run tree's budget was spent: the run's last round ran without tools."""

    kind: ClassVar[str] = "budget_exhausted"
    budget: str
    """``tokens``, ``cost_usd`` or ``tool_calls``."""
    used: float
    limit: float

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "budget": self.budget, "used": self.used, "limit": self.limit}


@dataclass(frozen=True, slots=True)
class ListToolsStep:
    """A listing of one server's tools that failed (``error``), or that dropped headers its plugin
    asked to forward (``dropped_headers``)."""

    kind: ClassVar[str] = "list_tools"
    server: str
    outcome: Outcome
    error: str | None = None
    dropped_headers: tuple[str, ...] | None = None
    round: int | None = None
    """The round the run was in when it listed: set by the run when the step is reported."""

    @classmethod
    def failed(cls, server: str, message: str) -> ListToolsStep:
        return cls(server, Outcome.ERROR, error=message)

    @classmethod
    def dropped(cls, server: str, headers: Iterable[str]) -> ListToolsStep:
        return cls(server, Outcome.OK, dropped_headers=tuple(headers))

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {
            "type": self.kind,
            "round": self.round,
            "server": self.server,
            "outcome": self.outcome.value,
        }
        if self.error is not None:
            step["error"] = self.error
        if self.dropped_headers is not None:
            step["dropped_headers"] = list(self.dropped_headers)
        return step


@dataclass(frozen=True, slots=True)
class TaskStep:
    """A tool call the server runs as an MCP task: each status it was seen in before its end
    (``working``, ``input_required``), with the server's status message."""

    kind: ClassVar[str] = "task"
    server: str
    tool: str
    status: str
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {
            "type": self.kind,
            "server": self.server,
            "tool": self.tool,
            "status": self.status,
        }
        if self.message:
            step["message"] = self.message
        return step


@dataclass(frozen=True, slots=True)
class InputRoundStep:
    """A round of a tool call that asked for input (MCP input requests): what it ``asked``, or that
    the end user's message ``answered`` it."""

    kind: ClassVar[str] = "input_round"
    server: str
    tool: str
    input_round: int
    asked: tuple[str, ...] | None = None
    """The methods the server asked (``elicitation/create``, ``sampling/createMessage``…)."""
    answered: bool = False

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {
            "type": self.kind,
            "server": self.server,
            "tool": self.tool,
            "input_round": self.input_round,
        }
        if self.asked is not None:
            step["asked"] = list(self.asked)
        if self.answered:
            step["answered"] = True
        return step


@dataclass(frozen=True, slots=True)
class ToolDriftStep:
    """A tool whose definition differed from its pin (``engine/tools/mcp/pinning.py``)."""

    kind: ClassVar[str] = "tool_drift"
    server: str
    tool: str
    change: str
    """``drifted``, ``new``, or ``unpinnable`` (the organisation holds its maximum of pins)."""
    withheld: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "server": self.server,
            "tool": self.tool,
            "change": self.change,
            "withheld": self.withheld,
        }


@dataclass(frozen=True, slots=True)
class ToolDescriptionStep:
    """An MCP tool whose description a guard found instructions in (``engine/guards``)."""

    kind: ClassVar[str] = "tool_description"
    tool: str
    guard: Mapping[str, Any]
    """What the guard found and did (``Inspected.record()``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "tool": self.tool, "guard": self.guard}


@dataclass(frozen=True, slots=True)
class SideCallStep:
    """A model call besides the rounds (a guard's classifier, an MCP server's sampling request):
    ``kind`` is its step's type. Its ``usage`` counts in the run's tokens and spend when reported;
    None: the call failed and used nothing known."""

    kind: str
    model: str
    source: str | None = None
    """What the call was about (the tool whose output a classifier judged)."""
    outcome: Outcome | None = None
    usage: Usage | None = None

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {"type": self.kind, "model": self.model}
        if self.source is not None:
            step["source"] = self.source
        if self.outcome is not None:
            step["outcome"] = self.outcome.value
        if self.usage is not None:
            step.update(
                prompt_tokens=self.usage.prompt_tokens,
                completion_tokens=self.usage.completion_tokens,
                cost_usd=self.usage.cost,
            )
        return step


@dataclass(frozen=True, slots=True)
class SideCallsOmittedStep:
    """How many side calls past the ones a record keeps (``MAX_SIDE_STEPS``) it only counts."""

    kind: ClassVar[str] = "side_calls_omitted"
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "count": self.count}


LoopStep = ModelCallStep | ToolCallStep | BudgetExhaustedStep
"""A step of the loop's own (``RunResult.steps``)."""


@dataclass(frozen=True, slots=True)
class EstimatedUsageStep:
    """A streamed model call the client abandoned before the upstream reported its usage: what it is
    counted as (spend, budgets, token limits) — the input estimated from the request, the output from
    the text already streamed, four characters a token. Real providers bill what they generated."""

    kind: ClassVar[str] = "usage_estimated"
    round: int
    tokens: StepTokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "round": self.round,
            "prompt_tokens": self.tokens.prompt_tokens,
            "completion_tokens": self.tokens.completion_tokens,
            "cost_usd": self.tokens.cost_usd,
            "basis": "the request's size and the text streamed before the client went away",
        }


ReportedStep = (
    ListToolsStep
    | InputRoundStep
    | TaskStep
    | ToolDriftStep
    | ToolDescriptionStep
    | SideCallStep
    | EstimatedUsageStep
)
"""A step reported to the run (``RunState.report``)."""
RunLogStep = LoopStep | ReportedStep | SideCallsOmittedStep

_REPORTED_ORDER: tuple[type, ...] = (
    InputRoundStep,
    TaskStep,
    ToolDriftStep,
    ToolDescriptionStep,
    SideCallStep,
    EstimatedUsageStep,
)


def _place(step: ReportedStep) -> int:
    """Where a reported step goes in the record: failed listings first, then listings that dropped
    headers, input rounds, tasks' statuses, drifts, descriptions and side calls (each kind in the
    order reported)."""
    if isinstance(step, ListToolsStep):
        return 0 if step.outcome is Outcome.ERROR else 1
    return 2 + _REPORTED_ORDER.index(type(step))


def record_steps(
    reported: Iterable[ReportedStep], side_calls_omitted: int, steps: Iterable[LoopStep]
) -> list[dict[str, Any]]:
    """A run record's steps: what was reported to the run, then the loop's steps, as JSON."""
    ordered: list[RunLogStep] = sorted(reported, key=_place)
    if side_calls_omitted:
        ordered.append(SideCallsOmittedStep(side_calls_omitted))
    ordered.extend(steps)
    return [step.to_dict() for step in ordered]
