"""Binding the hosted ``spawn_subagent`` to a run: an agent with ``subagents.enabled``, run by an
adapter that can run child responses."""

from __future__ import annotations

from hatchway.config.settings import AgentConfig
from hatchway.engine.tools.subagents.contract import ChildRunner
from hatchway.engine.tools.subagents.toolset import SubagentToolset


def bind_subagents(
    agent: AgentConfig | None, children: ChildRunner | None, *, default_model: str
) -> SubagentToolset | None:
    """The run's ``spawn_subagent`` toolset, or None.

    Children are stored responses, so only an adapter that stores responses passes a runner (the
    Responses API does; Chat Completions does not).
    """
    if agent is None or not agent.subagents.enabled or children is None:
        return None
    return SubagentToolset(children, agent.subagents, default_model=default_model)
