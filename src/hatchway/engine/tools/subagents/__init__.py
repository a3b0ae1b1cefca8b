"""Hosted ``spawn_subagent``: child responses run by the gateway, in parallel, linked to the parent."""

from hatchway.engine.tools.subagents.binding import bind_subagents
from hatchway.engine.tools.subagents.contract import ChildRequest, ChildResult, ChildRunner
from hatchway.engine.tools.subagents.toolset import SubagentToolset

__all__ = ["ChildRequest", "ChildResult", "ChildRunner", "SubagentToolset", "bind_subagents"]
