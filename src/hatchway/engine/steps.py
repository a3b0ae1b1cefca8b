"""What happens after a model round: each round of the loop ends in one of these, and the loop does
what it says — another round, or the end of the run, described by the step."""

from __future__ import annotations

from dataclasses import dataclass

from hatchway.engine.items import FunctionCall
from hatchway.engine.providers.base import ModelResponse
from hatchway.engine.tools.base import Interruption


@dataclass(frozen=True, slots=True)
class NextStepRunAgain:
    """The round's gateway tools ran: call the model again."""


@dataclass(frozen=True, slots=True)
class NextStepRunTools:
    """The model called gateway tools: run them (then decide again)."""

    calls: list[FunctionCall]


@dataclass(frozen=True, slots=True)
class NextStepPauseForClient:
    """The model called client-declared tools: the gateway's calls of the round run, then the client's
    go back to the caller."""

    response: ModelResponse
    client_calls: list[FunctionCall]
    server_calls: list[FunctionCall]


@dataclass(frozen=True, slots=True)
class NextStepInterruption:
    """A tool needs the end user (a confirmation): ask them and stop."""

    interruption: Interruption


@dataclass(frozen=True, slots=True)
class NextStepFinalOutput:
    """The model answered."""

    response: ModelResponse


@dataclass(frozen=True, slots=True)
class NextStepGatewayAnswer:
    """The gateway answers without the model (a pending confirmation's question, asked again; the
    outcome of an operation a duplicate "yes" confirmed already)."""

    text: str
    operation_id: str | None = None
    """The operation the answer is about (the chat adapter's ``x-hatchway-operation-id``)."""


@dataclass(frozen=True, slots=True)
class NextStepMaxRounds:
    """``max_rounds`` reached: the last round's tools have run; return that round's model response."""

    response: ModelResponse


@dataclass(frozen=True, slots=True)
class NextStepTimeout:
    """The run's deadline passed: return the last complete model response, if any."""


NextStep = (
    NextStepRunAgain
    | NextStepRunTools
    | NextStepPauseForClient
    | NextStepInterruption
    | NextStepFinalOutput
    | NextStepGatewayAnswer
    | NextStepMaxRounds
    | NextStepTimeout
)
FinalStep = (
    NextStepPauseForClient
    | NextStepInterruption
    | NextStepFinalOutput
    | NextStepGatewayAnswer
    | NextStepMaxRounds
    | NextStepTimeout
)
"""The steps that end a run."""
