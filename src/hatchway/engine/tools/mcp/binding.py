"""Binding an MCP plugin to a run: from an agent, a routing rule, or the inline request header.

``PluginBinding.bind`` returns the run's ``PluginPart`` (its MCP client, the toolset the model sees,
the plugin's loop settings). Plugin files named in hatchway.yaml are parsed once, when the binding
is built (a broken one stops the start with the file and the field path). Inline plugins are parsed
per distinct header value, in a worker thread and within ``config/yaml_loader.py``'s limits, so a
header built to be slow to parse delays no other request; plugins and refusals alike are remembered
by the hash of the header, so a repeat costs a hash and no parse.

An agent with ``tools:`` (tools.yaml) gets the plugin's client but not the plugin's tools: its model
sees only what tools.yaml declares, bound by the operations binding under their policies. Offering
the plain MCP tools as well would let the model call a transactional tool (or its validator) around
its confirmation.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import fnmatch
import hashlib
import importlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from hatchway.config.plugin import PluginConfig, StreamMode, parse_plugin
from hatchway.config.plugins import ConfiguredPlugins
from hatchway.config.settings import AgentConfig, Settings
from hatchway.egress import check_egress
from hatchway.engine.context import RunBudget, RunContext
from hatchway.engine.tools.base import Toolset
from hatchway.engine.tools.mcp.credentials import McpCredentials, requester_of
from hatchway.engine.tools.mcp.forwarding import forwarded_headers
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import ConfigError, Conflict, InvalidRequest, PermissionDenied, SecretNotFound
from hatchway.store.cache import Cache

if TYPE_CHECKING:
    from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

PLUGIN_HEADER = "hatchway-mcp-plugin"
PLUGIN_HEADER_ALIASES = ("floopy-mcp-plugin",)
"""Accepted for teams migrating from Floopy."""
MAX_INLINE_PLUGIN_BYTES = 32 * 1024
"""YAML bytes of an inline plugin; ``config/yaml_loader.py`` bounds its depth, nodes and parse time."""
_INLINE_CACHE_SIZE = 256
"""Distinct inline headers remembered: 256 plugins, and apart from them 256 refusals."""

V = TypeVar("V")


class _Recent(Generic[V]):
    """The ``size`` most recently used entries, by key."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class BoundPlugin:
    plugin: PluginConfig
    source: str
    """``agent:<name>``, ``rule:<name>`` or ``inline``."""
    trusted: bool
    header: str | None = None


@dataclass(frozen=True, slots=True)
class PluginPart:
    """What a plugin gives a run."""

    client: PluginMcpClient
    """Calls tools on the plugin's servers (operations call their validators and tools with it)."""
    toolset: Toolset | None
    """The plugin's tools for the model; None for an agent with tools.yaml (see the module docstring)."""
    source: str
    max_rounds: int
    tool_call_parallel: bool
    stream_mode: StreamMode
    budget: RunBudget | None = None
    """The plugin's ``agent.max_run_*`` budget for the run tree."""
    guarded: bool = False
    """``agent.prompt_guard_on_tool_output``: its runs' tool output is guarded (``engine/guards``)."""


class PluginBinding:
    """Finds each request's plugin and binds its MCP tools and loop settings."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: McpServerPool,
        credentials: McpCredentials,
        cache: Cache,
        questions: Any = None,
        models: Any = None,
        pinning: Any = None,
        plugins: ConfiguredPlugins | None = None,
        tasks: Any = None,
    ) -> None:
        self.pool = pool
        self.tasks = tasks
        """``TaskLedger``: the runs' upstream MCP tasks, durable (None: followed in memory only)."""
        self.task_settings = settings.mcp_tasks
        self.task_resumes = False
        """Whether a background run stopped with its replica runs again (the job queue): then its
        upstream tasks are left running for it, else cancelled."""
        self.pinning = pinning
        """``ToolPinning``: tool definitions checked against the organisation's pins (None: not checked)."""
        self.models = models
        """``ModelRouter``: what a plugin with ``agent.allow_sampling`` samples with."""
        self.questions = questions
        """``InputQuestions``: tools' questions to the end user, held across turns (None: refused)."""
        self.credentials = credentials
        self.cache = cache
        self.allow_private = settings.allow_private_mcp_urls
        self.max_result_chars = settings.max_tool_result_chars
        self._configured = plugins if plugins is not None else ConfiguredPlugins(settings)
        self._rules = self._configured.rules
        self._agents = self._configured.agents
        self._inline: _Recent[PluginConfig] = _Recent(_INLINE_CACHE_SIZE)
        self._refused: _Recent[str] = _Recent(_INLINE_CACHE_SIZE)
        """The message of each refused header: a repeat is refused again without a parse."""
        if self._configured.any:  # plugins are configured: load the MCP client now, not on the first request
            importlib.import_module("hatchway.engine.tools.mcp.toolset")

    async def check(
        self, agent: AgentConfig | None, public_model: str, ctx: RunContext
    ) -> BoundPlugin | None:
        """The request's plugin, checked as a run of it would be: a bad inline plugin, a refused
        address, a bad forwarded header or a secret it may not use fail now (4xx)."""
        bound = await self.select(agent, public_model, ctx.request_headers)
        if bound is None:
            return None
        if not bound.trusted:
            await _check_untrusted(bound, allow_private=self.allow_private)
        await self._authorize(bound, ctx)
        return bound

    async def bind(self, agent: AgentConfig | None, public_model: str, ctx: RunContext) -> PluginPart | None:
        """The run's plugin part, or None when no plugin is bound to this request."""
        bound = await self.check(agent, public_model, ctx)
        if bound is None:
            return None
        from hatchway.engine.tools.mcp.toolset import McpToolset  # with the MCP SDK: see pool.py

        client = self._client(bound)
        settings = bound.plugin.agent
        if settings.allow_sampling and self.models is not None:
            from hatchway.engine.tools.mcp.sampling import RunSampler

            client.sampler = RunSampler(self.models, agent.model if agent is not None else public_model)
        toolset = None
        if agent is None or not agent.tools:  # tools.yaml agents: see the module docstring
            toolset = McpToolset(
                client,
                cache=self.cache,
                cache_ttl_seconds=settings.tool_cache_ttl_seconds,
                max_result_chars=self.max_result_chars,
                questions=self.questions,
                pinning=self.pinning,
            )
        return PluginPart(
            client=client,
            toolset=toolset,
            source=bound.source,
            max_rounds=settings.max_rounds,
            tool_call_parallel=settings.tool_call_parallel,
            stream_mode=settings.stream_mode,
            budget=RunBudget(settings.max_run_tokens, settings.max_run_cost_usd, settings.max_run_tool_calls),
            guarded=settings.prompt_guard_on_tool_output,
        )

    async def agent_caller(self, agent: AgentConfig, ctx: RunContext) -> PluginMcpClient:
        """The MCP client of ``agent``'s plugin outside a run (a confirmation through
        ``POST /v1/operations/{id}/confirm`` executes with it)."""
        plugin = self._agents.get(agent.name)
        if plugin is None:
            raise Conflict(
                f"The agent '{agent.name}' has no plugin, so its operations cannot be executed.",
                code="agent_without_plugin",
            )
        bound = BoundPlugin(plugin, f"agent:{agent.name}", trusted=True)
        await self._authorize(bound, ctx)
        return self._client(bound)

    async def select(
        self, agent: AgentConfig | None, public_model: str, headers: Mapping[str, str]
    ) -> BoundPlugin | None:
        """The plugin for this request: the agent's own, else the inline header, else a routing rule."""
        header, value = _inline_header(headers)
        if agent is not None and agent.name in self._agents:
            if header is not None:
                raise InvalidRequest(
                    f"{header}: the agent '{agent.name}' has its own plugin; do not send this header with it",
                    param=header,
                    code="invalid_plugin",
                )
            return BoundPlugin(self._agents[agent.name], f"agent:{agent.name}", trusted=True)
        if header is not None and value is not None:
            return BoundPlugin(await self.inline(header, value), "inline", trusted=False, header=header)
        for rule, plugin in self._rules:
            if fnmatch.fnmatchcase(public_model, rule.match.model):
                return BoundPlugin(plugin, f"rule:{rule.name}", trusted=True)
        return None

    async def inline(self, header: str, value: str) -> PluginConfig:
        """Decode and validate an inline plugin in a worker thread, unless this header is remembered."""
        digest = hashlib.sha256(f"{header}:{value}".encode()).hexdigest()
        refusal = self._refused.get(digest)
        if refusal is not None:
            raise _invalid(header, refusal)
        plugin = self._inline.get(digest)
        if plugin is not None:
            return plugin
        try:
            plugin = await asyncio.to_thread(decode_inline_plugin, header, value)
        except InvalidRequest as exc:
            self._refused.put(digest, exc.message)
            raise
        self._inline.put(digest, plugin)
        return plugin

    async def _authorize(self, bound: BoundPlugin, ctx: RunContext) -> None:
        """Bad forwarded values and secrets the plugin may not use fail now, naming the field."""
        for i, server in enumerate(bound.plugin.mcp_servers):
            forwarded_headers(server.forward_headers, ctx.request_headers)  # CR/LF values → 400 now
            try:
                await self.credentials.authorize(server, requester_of(ctx), trusted=bound.trusted)
            except (SecretNotFound, PermissionDenied) as exc:  # name the plugin field, not "name"
                param = f"mcp_servers[{i}].auth.secret_ref"
                raise type(exc)(exc.message, param=param, code=exc.code) from None

    def _client(self, bound: BoundPlugin) -> PluginMcpClient:
        from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

        return PluginMcpClient(
            bound.plugin,
            trusted=bound.trusted,
            pool=self.pool,
            credentials=self.credentials,
            guard_egress=not bound.trusted and not self.allow_private,
            answerer=self.questions,
            tasks=self.tasks,
            task_settings=self.task_settings,
            task_resumes=self.task_resumes,
        )


def _inline_header(headers: Mapping[str, str]) -> tuple[str | None, str | None]:
    for name in (PLUGIN_HEADER, *PLUGIN_HEADER_ALIASES):
        value = headers.get(name)
        if value is not None:
            return name, value
    return None, None


def decode_inline_plugin(header: str, value: str) -> PluginConfig:
    """base64 → YAML → PluginConfig; every failure is a 400 that names the header (and the field).

    Synchronous and CPU-bound (up to ``yaml_loader.CPU_SECONDS`` walking the YAML, tens of ms building
    it): run it in a worker thread.
    """

    def bad(message: str) -> InvalidRequest:
        return _invalid(header, f"{header}: {message}")

    raw = "".join(value.split())
    if not raw:
        raise bad("empty; send the plugin YAML encoded in base64")
    if len(raw) > MAX_INLINE_PLUGIN_BYTES * 4 // 3 + 4:
        raise bad(f"too large (at most {MAX_INLINE_PLUGIN_BYTES} bytes of YAML)")
    compact = raw.translate(_URLSAFE)  # the URL-safe alphabet is accepted too
    try:
        text = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise bad("not valid base64-encoded UTF-8 YAML") from None
    try:
        return parse_plugin(text, f"{header} header", untrusted=True)
    except ConfigError as exc:  # the first problems only: a 32 KB plugin can hold thousands
        shown = exc if len(exc.problems) <= MAX_PROBLEMS_SHOWN else _first_problems(exc)
        raise _invalid(header, shown.message) from None


MAX_PROBLEMS_SHOWN = 20


def _first_problems(exc: ConfigError) -> ConfigError:
    more = len(exc.problems) - MAX_PROBLEMS_SHOWN
    return ConfigError(exc.source, [*exc.problems[:MAX_PROBLEMS_SHOWN], ("", f"and {more} more problems")])


def _invalid(header: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, param=header, code="invalid_plugin")


_URLSAFE = str.maketrans("-_", "+/")


async def _check_untrusted(bound: BoundPlugin, *, allow_private: bool) -> None:
    """Inline plugins come from API callers: no stdio commands, no private or metadata addresses."""
    header = bound.header or PLUGIN_HEADER
    for i, server in enumerate(bound.plugin.mcp_servers):
        if server.kind == "stdio":
            raise PermissionDenied(
                f"{header}: mcp_servers[{i}].command: stdio servers run a local command and are only "
                "allowed in plugins from hatchway.yaml",
                param=header,
                code="egress_denied",
            )
        for field, url in (("url", server.url), ("auth.token_url", server.auth.token_url)):
            if url is None:
                continue
            try:
                await check_egress(url, allow_private=allow_private)
            except PermissionDenied as exc:
                raise PermissionDenied(
                    f"{header}: mcp_servers[{i}].{field}: {exc.message}", param=header, code=exc.code
                ) from None
