"""Hosted ``spawn_subagent``: child responses run by the gateway, in parallel, linked to the parent."""

from hatchway.engine.tools.subagents.contributor import contribute_subagents
from hatchway.engine.tools.subagents.toolset import (
    CHILD_RUNNER_KEY,
    ChildOutcome,
    ChildRequest,
    ChildRunner,
    SubagentToolset,
)

__all__ = [
    "CHILD_RUNNER_KEY",
    "ChildOutcome",
    "ChildRequest",
    "ChildRunner",
    "SubagentToolset",
    "contribute_subagents",
]
