"""Tool-definition pinning: a tool whose definition changed since it was approved (a "rug pull") is
withheld from the model until ``hatchway tools approve`` (docs/security.md, "Tool-definition pinning").

What is pinned is what the model would read and what the call would be checked against: the
server's URL, the tool's name, title, description, input and output schemas and annotations.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.context import RunContext
from hatchway.engine.run_log import ListToolsStep, ToolDriftStep
from hatchway.store.tool_pins import Seen, ToolPins, definition_hash

logger = logging.getLogger(__name__)

_APPROVED_SECONDS = 10.0
"""How long a listing found approved is taken as approved without reading the pins again. Only an
approval that replaces a definition makes such an entry stale (the old one is accepted this much
longer); a drift is never cached, so a re-approval on any replica is seen at the next listing."""
_APPROVED_ENTRIES = 4096
_PINNED = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def definition(server: McpServerConfig, tool: Any) -> dict[str, Any]:
    """What is pinned of ``tool`` (an MCP ``Tool``)."""
    dumped = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    kept = {k: dumped[k] for k in _PINNED if k in dumped}
    return {"server_url": server.url or server.command or "", **kept}


def drift_policy(server: McpServerConfig, *, trusted: bool) -> str:
    """``tool_drift`` of ``server``: as set, else ``warn`` for hatchway.yaml's, ``block`` for inline."""
    return server.tool_drift or ("warn" if trusted else "block")


def unpinned(server: McpServerConfig, tools: list[Any], ctx: RunContext, *, trusted: bool) -> set[str]:
    """Which of the admitted ``tools`` no approved pin vouches for: all under ``allow``, the drifted,
    new or unpinnable ones kept under ``warn`` (this run's ``tool_drift`` steps)."""
    if drift_policy(server, trusted=trusted) == "allow":
        return {tool.name for tool in tools}
    drifts = ctx.run.reported(ToolDriftStep)
    return {d.tool for d in drifts if d.server == server.id and not d.withheld}


class ToolPinning:
    """Checks each listing of a server's tools against the organisation's pins."""

    def __init__(self, pins: ToolPins) -> None:
        self.pins = pins
        self._approved: dict[tuple[str, str, str], float] = {}
        self._hashed: dict[tuple[str, tuple[int, ...]], tuple[tuple[Any, ...], list[Seen], str]] = {}
        """The definitions and hashes of a listing already seen, by its tools' identities: the pool
        hands out the same tool objects while its listing is cached, so a call hashes nothing."""

    def _hashes(self, server: McpServerConfig, tools: list[Any]) -> tuple[list[Seen], str]:
        """Each tool's definition and hash, and the listing's: computed once per listing."""
        identity = (server.id, tuple(map(id, tools)))
        hit = self._hashed.get(identity)
        if hit is not None and all(a is b for a, b in zip(hit[0], tools, strict=True)):
            return hit[1], hit[2]
        seen = []
        for tool in tools:
            body = definition(server, tool)
            seen.append(Seen(tool.name, body, definition_hash(body)))
        digest = definition_hash({item.tool: item.hash for item in seen})
        if len(self._hashed) >= _APPROVED_ENTRIES:
            self._hashed.clear()
        self._hashed[identity] = (tuple(tools), seen, digest)  # the tools kept: their ids stay theirs
        return seen, digest

    async def admitted(
        self, server: McpServerConfig, tools: list[Any], ctx: RunContext, *, trusted: bool
    ) -> list[Any]:
        """The tools the model may see: ``tools`` less those withheld under ``tool_drift: block``."""
        policy = drift_policy(server, trusted=trusted)
        if policy == "allow" or not tools:
            return tools
        seen, digest = self._hashes(server, tools)
        key = (ctx.org_id, server.id, digest)
        now = time.monotonic()
        if self._approved.get(key, 0.0) > now:
            return tools
        # What is stored and shown (`hatchway tools diff`) has the run's known secrets redacted (a
        # server may echo one in a description); the hashes are of what the server said.
        stored = [Seen(item.tool, ctx.redact_value(item.definition), item.hash) for item in seen]
        verdicts = await self.pins.check(ctx.org_id, server.id, stored, add_approved=policy == "warn")
        changed = {name: verdict for name, verdict in verdicts.items() if verdict != "approved"}
        if not changed:
            if len(self._approved) >= _APPROVED_ENTRIES:
                self._approved = {k: v for k, v in self._approved.items() if v > now}
                while len(self._approved) >= _APPROVED_ENTRIES:
                    del self._approved[next(iter(self._approved))]
            self._approved[key] = now + _APPROVED_SECONDS
            return tools
        for name, verdict in changed.items():
            withheld = policy == "block"
            ctx.run.report(ToolDriftStep(server.id, name, verdict, withheld))
            what = {
                "drifted": "its definition changed since it was approved",
                "new": "the server added it after its tools were pinned",
            }.get(verdict, "the organisation holds max_tool_pins_per_organisation pins")
            logger.warning(
                "MCP server %s (organisation %s), tool %s: %s; %s (hatchway tools diff)",
                server.id,
                ctx.org_id,
                name,
                what,
                "withheld until approved" if withheld else "kept (tool_drift: warn)",
            )
            if withheld:
                message = f"tool '{name}' withheld: {what} (see hatchway tools diff)"
                ctx.run.report(ListToolsStep.failed(server.id, message))
        if policy == "warn":
            return tools
        return [tool for tool in tools if tool.name not in changed]
