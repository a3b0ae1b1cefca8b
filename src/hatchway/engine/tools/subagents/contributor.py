"""The plan contributor that gives an agent with ``subagents.enabled`` its hosted spawn_subagent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hatchway.engine.context import RunContext
from hatchway.engine.tools.subagents.toolset import CHILD_RUNNER_KEY, SubagentToolset

if TYPE_CHECKING:
    from hatchway.gateway import Gateway, RunPlan


async def contribute_subagents(
    gw: Gateway, plan: RunPlan, ctx: RunContext, headers: Mapping[str, str]
) -> None:
    """Bind ``spawn_subagent`` when the agent enables it and the adapter can run child responses.

    Children are stored responses, so only an adapter that stores responses puts a child runner in
    ``ctx.extras[CHILD_RUNNER_KEY]`` (the Responses API does; Chat Completions does not).
    """
    agent = plan.agent
    runner = ctx.extras.get(CHILD_RUNNER_KEY)
    if agent is None or not agent.subagents.enabled or runner is None:
        return
    plan.toolsets.append(SubagentToolset(runner, agent.subagents, default_model=plan.public_model))
