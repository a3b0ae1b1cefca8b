"""How one request will run, decided in one step: ``Planner.plan`` → a frozen ``RunPlan``.

The parts are decided in this order, each by the binding that owns it and given only what it needs:

1. the target: the model asked for, or the agent it names, and the provider behind it;
2. the plugin (``PluginBinding``): the agent's own, the inline header, or a routing rule — its MCP
   client, its tools for the model and its loop settings;
3. the agent's tools.yaml operations (``OperationBinding``), calling through the plugin's client;
4. the hosted ``spawn_subagent`` (``bind_subagents``), when the agent enables it and the adapter
   can run child responses.

The run's scope then begins (gauge, span), and its instruments wrap the model and toolsets in
spans. ``Planner.prepare`` is the one entry every adapter (Chat Completions, Messages, Responses)
takes: the plan, the conversation the model reads and the loop that runs it, from one ``RunRequest``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hatchway.access.roles import check_model
from hatchway.config.plugin import StreamMode
from hatchway.config.settings import AgentConfig, Settings
from hatchway.engine.context import RunBudget, RunContext
from hatchway.engine.guards.classifier import Classifier
from hatchway.engine.guards.guard import ToolOutputGuard
from hatchway.engine.items import Item, Message, ToolSpec
from hatchway.engine.loop import AgentLoop, LoopSettings
from hatchway.engine.pricing import call_cost
from hatchway.engine.providers.routing import ModelRouter, ResolvedModel
from hatchway.engine.run import RunScope
from hatchway.engine.tools.base import Toolset
from hatchway.engine.tools.mcp.binding import PluginBinding, PluginPart
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.binding import OperationBinding
from hatchway.engine.tools.router import ToolRouter
from hatchway.engine.tools.subagents import ChildRunner, bind_subagents
from hatchway.errors import Conflict, ModelNotFound

AGENT_PREFIX = "agent:"


@dataclass(frozen=True, slots=True)
class Target:
    """What a request's ``model`` names: a model, or an agent and its model."""

    public_model: str
    """The name the client asked for (``gpt-4o``, ``agent:contas``…)."""
    model: ResolvedModel
    agent: AgentConfig | None = None


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What an adapter asks of a run's plan."""

    model: str
    children: ChildRunner | None = None
    """Who runs ``spawn_subagent`` children (adapters that store responses)."""
    max_tool_calls: int | None = None
    stream_tool_round_text: bool = False
    """Stream the text of tool rounds too (the Responses API keeps those messages in its output)."""


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What an adapter asks of one run: the model, the conversation, and the client's part of the loop."""

    model: str
    items: Sequence[Item]
    """The conversation as the client sent it (its history included), in canonical items."""
    instructions: str | None = None
    """The request's own instructions (the Responses API's), after the agent's."""
    client_tools: Sequence[ToolSpec] = ()
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    params: dict[str, Any] | None = None
    """Upstream parameters passed through (temperature, max_tokens…)."""
    children: ChildRunner | None = None
    max_tool_calls: int | None = None
    stream_tool_round_text: bool = False


@dataclass(frozen=True, slots=True)
class PreparedRun:
    """A planned run, ready to go: its plan, the conversation the model reads, and its loop."""

    plan: RunPlan
    conversation: list[Item]
    loop: AgentLoop


@dataclass(frozen=True, slots=True)
class RunPlan:
    """How one request will run: which model, which gateway tools, under which limits."""

    target: Target
    toolsets: tuple[Toolset, ...] = ()
    loop: LoopSettings = field(default_factory=LoopSettings)
    stream_mode: StreamMode = "final_only"
    plugin_source: str | None = None
    """``rule:<name>``, ``inline`` or ``agent:<name>``; None when no plugin is bound."""

    @property
    def agent(self) -> AgentConfig | None:
        return self.target.agent

    def conversation(self, items: Sequence[Item], instructions: str | None = None) -> list[Item]:
        """``items`` after the agent's instructions and the request's own, as system messages."""
        agent_instructions = self.agent.instructions if self.agent is not None else None
        system = [Message(role="system", content=t) for t in (agent_instructions, instructions) if t]
        return [*system, *items]

    def agent_loop(
        self,
        *,
        client_tools: Sequence[ToolSpec] = (),
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
        params: dict[str, Any] | None = None,
    ) -> AgentLoop:
        """The loop of this run, with the tools the client declared and its request parameters."""
        router = ToolRouter(toolsets=list(self.toolsets), client_tools=list(client_tools))
        return AgentLoop(
            self.target.model,
            router,
            self.loop,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            params=params,
        )


class Planner:
    """Builds run plans for one gateway from its model router and its tool bindings."""

    def __init__(
        self,
        settings: Settings,
        *,
        models: ModelRouter,
        plugins: PluginBinding,
        operations: OperationBinding,
    ) -> None:
        self.models = models
        self.plugins = plugins
        self.operations = operations
        self.max_tool_result_chars = settings.max_tool_result_chars
        self.guards = settings.guards
        judge = settings.guards.classifier
        self.classifier = Classifier(judge, models) if judge is not None else None
        self.max_tool_calls_per_round = settings.max_tool_calls_per_round
        self.max_tool_calls_per_run = settings.max_tool_calls_per_run
        self._agents = {a.name: a for a in settings.agents}

    def agent(self, model: str) -> AgentConfig | None:
        """The agent addressed as ``agent:<name>``, None for a plain model; ModelNotFound if unknown."""
        if not model.startswith(AGENT_PREFIX):
            return None
        agent = self._agents.get(model[len(AGENT_PREFIX) :])
        if agent is None:
            raise ModelNotFound(model)
        return agent

    def target(self, model: str) -> Target:
        """The model (or agent) a request names; ModelNotFound (404) if none."""
        agent = self.agent(model)
        return Target(model, self.models.resolve(agent.model if agent else model), agent)

    async def check(self, model: str, ctx: RunContext) -> Target:
        """What planning would refuse, without planning: for a response that another process will
        run (the job queue), so a bad request still fails when it is made."""
        check_model(ctx.principal, model)
        target = self.target(model)
        await self.plugins.check(target.agent, target.public_model, ctx)
        return target

    async def prepare(self, request: RunRequest, scope: RunScope) -> PreparedRun:
        """Plan ``request`` in ``scope`` (which begins), and build the conversation and the loop."""
        plan = await self.plan(
            PlanRequest(
                model=request.model,
                children=request.children,
                max_tool_calls=request.max_tool_calls,
                stream_tool_round_text=request.stream_tool_round_text,
            ),
            scope.ctx,
            scope,
        )
        loop = plan.agent_loop(
            client_tools=request.client_tools,
            tool_choice=request.tool_choice,
            parallel_tool_calls=request.parallel_tool_calls,
            params=request.params,
        )
        return PreparedRun(plan, plan.conversation(request.items, request.instructions), loop)

    async def plan(self, request: PlanRequest, ctx: RunContext, scope: RunScope) -> RunPlan:
        """Resolve the model (or agent) and everything bound to this request, then begin its scope."""
        if ctx.depth == 0:  # a subagent's model is its agent's configuration, not the caller's choice
            check_model(ctx.principal, request.model)
        target = self.target(request.model)
        plugin = await self.plugins.bind(target.agent, target.public_model, ctx)
        caller: McpToolCaller | None = plugin.client if plugin is not None else None
        toolsets = [
            plugin.toolset if plugin is not None else None,
            self.operations.bind(target.agent, caller),
            bind_subagents(target.agent, request.children, default_model=target.public_model),
        ]
        guarded = self.guards.enabled or (plugin is not None and plugin.guarded)
        # One construction (dataclasses.replace costs more than the rest of planning a plain call).
        per_plugin: dict[str, Any] = {}
        if plugin is not None:
            per_plugin = {"max_rounds": plugin.max_rounds, "tool_call_parallel": plugin.tool_call_parallel}
        loop = LoopSettings(
            max_tool_calls=request.max_tool_calls,
            max_tool_result_chars=self.max_tool_result_chars,
            max_tool_calls_per_round=self.max_tool_calls_per_round,
            max_tool_calls_per_run=self.max_tool_calls_per_run,
            stream_tool_round_text=request.stream_tool_round_text,
            price=call_cost,  # what the provider priced the call at (engine/pricing.py)
            budget=run_budget(target.agent, plugin),
            guard=ToolOutputGuard(self.guards, self.classifier) if guarded else None,
            **per_plugin,
        )
        source = plugin.source if plugin is not None else None
        agent = target.agent.name if target.agent is not None else None
        instruments = scope.begin(name=agent or target.public_model, agent=agent, plugin_source=source)
        return RunPlan(
            target=Target(target.public_model, instruments.model(target.model), target.agent),
            toolsets=tuple(instruments.toolset(t) for t in toolsets if t is not None),
            loop=loop,
            stream_mode=plugin.stream_mode if plugin is not None else "final_only",
            plugin_source=source,
        )

    async def operation_caller(self, agent_name: str, ctx: RunContext) -> McpToolCaller:
        """An MCP caller for ``agent_name``'s plugin, to execute a confirmed operation outside a run."""
        agent = self._agents.get(agent_name)
        if agent is None:
            raise Conflict(
                f"The agent '{agent_name}' is no longer configured; its operations cannot be executed.",
                code="agent_not_configured",
            )
        return await self.plugins.agent_caller(agent, ctx)


def run_budget(agent: AgentConfig | None, plugin: PluginPart | None) -> RunBudget | None:
    """The run tree's budget this run sets: the agent's ``max_run_*`` and its plugin's, the lower
    of each."""
    budget = RunBudget()
    if agent is not None:
        budget.narrow(RunBudget(agent.max_run_tokens, agent.max_run_cost_usd, agent.max_run_tool_calls))
    if plugin is not None and plugin.budget is not None:
        budget.narrow(plugin.budget)
    return None if budget.empty else budget
