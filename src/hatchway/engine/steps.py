"""What happens after a model round: each round ends in one of these."""

from __future__ import annotations

from dataclasses import dataclass

from hatchway.engine.items import FunctionCall
from hatchway.engine.tools.base import Interruption


@dataclass(frozen=True, slots=True)
class NextStepRunTools:
    """Run the gateway's tool calls, then call the model again."""

    calls: list[FunctionCall]


@dataclass(frozen=True, slots=True)
class NextStepPauseForClient:
    """The model called client-declared tools: return them to the caller."""

    client_calls: list[FunctionCall]
    server_calls: list[FunctionCall]


@dataclass(frozen=True, slots=True)
class NextStepInterruption:
    """A tool needs the end user (confirmation): ask them and stop."""

    interruption: Interruption


@dataclass(frozen=True, slots=True)
class NextStepFinalOutput:
    """The model answered."""


@dataclass(frozen=True, slots=True)
class NextStepMaxRounds:
    """``max_rounds`` reached: the last round's tools have run; return that round's model response."""


@dataclass(frozen=True, slots=True)
class NextStepTimeout:
    """The run's deadline passed."""


NextStep = (
    NextStepRunTools
    | NextStepPauseForClient
    | NextStepInterruption
    | NextStepFinalOutput
    | NextStepMaxRounds
    | NextStepTimeout
)
