"""The running gateway: settings, storage, caches and upstream clients, built once per process."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hatchway.config.settings import Settings
from hatchway.engine.context import RunContext
from hatchway.engine.loop import LoopSettings
from hatchway.engine.providers.routing import ModelRouter, ResolvedModel
from hatchway.engine.tools.base import Toolset
from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database
from hatchway.store.logs import LogWriter, RequestLogStore
from hatchway.store.orgs import OrgStore

logger = logging.getLogger(__name__)


@dataclass
class RunPlan:
    """How one request will run: which model, which gateway tools, under which limits."""

    model: ResolvedModel
    toolsets: list[Toolset] = field(default_factory=list)
    loop: LoopSettings = field(default_factory=LoopSettings)
    stream_mode: str = "final_only"
    plugin_source: str | None = None
    """``rule:<name>``, ``inline`` or ``agent:<name>``; None when no plugin is bound."""
    agent: str | None = None
    instructions: str | None = None


class Gateway:
    """Owns every long-lived resource; the API and the CLI both go through it."""

    def __init__(self, settings: Settings, *, cache: Cache | None = None) -> None:
        self.settings = settings
        self.db = Database(settings.database_url)
        self.cache: Cache = cache or MemoryCache()
        self.orgs = OrgStore(self.db)
        self.logs = RequestLogStore(self.db)
        self.log_writer = LogWriter(self.db)
        self.models = ModelRouter(settings)
        self._started = False

    async def start(self) -> None:
        """Apply migrations and start background writers."""
        await self.db.migrate()
        self.log_writer.start()
        self._started = True

    async def close(self) -> None:
        await self.log_writer.close()
        await self.models.aclose()
        await self.cache.close()
        await self.db.close()

    async def plan_run(self, model: str, ctx: RunContext, headers: dict[str, str] | Any) -> RunPlan:
        """Resolve the model and the tools bound to this request."""
        resolved = self.models.resolve(model)
        return RunPlan(
            model=resolved,
            loop=LoopSettings(max_tool_result_chars=self.settings.max_tool_result_chars),
        )
