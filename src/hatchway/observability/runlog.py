"""Build the request-log record of one request from what the run produced."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.engine.loop import RunResult
from hatchway.engine.tools.base import TOOL_LISTING_FAILURES
from hatchway.ids import new_id
from hatchway.store.logs import LogRecord

RUN_END_KEY = "hatchway.run_end"
"""``ctx.extras`` key of the callable that closes a run's telemetry (see ``observability/telemetry.py``)."""


@dataclass
class RequestTrace:
    """Collects the facts of one request as it runs; ``to_record()`` makes the log row."""

    route: str
    ctx: RunContext
    model: str | None = None
    started: float = field(default_factory=time.monotonic)
    log_id: str = field(default_factory=lambda: new_id("log"))
    agent: str | None = None
    plugin_source: str | None = None
    response_id: str | None = None
    parent_id: str | None = None

    def to_record(
        self, *, http_status: int, result: RunResult | None = None, error: str | None = None
    ) -> LogRecord:
        latency_ms = (time.monotonic() - self.started) * 1000
        usage = result.usage if result is not None else None
        record = LogRecord(
            id=self.log_id,
            org_id=self.ctx.principal.org_id,
            key_id=self.ctx.principal.key_id,
            key_name=self.ctx.principal.key_name,
            on_behalf_of=self.ctx.on_behalf_of,
            route=self.route,
            model=self.model,
            agent=self.agent,
            plugin_source=self.plugin_source,
            status="ok" if http_status < 400 and error is None else "error",
            http_status=http_status,
            finish_reason=result.finish_reason if result is not None else None,
            latency_ms=round(latency_ms, 3),
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
            rounds=result.rounds if result is not None else 0,
            max_rounds_hit=result.max_rounds_hit if result is not None else False,
            has_tool_calls=result.has_tool_calls if result is not None else False,
            steps=[*self._listing_steps(), *(result.steps if result is not None else [])],
            error=self.ctx.redact(error) if error else None,
            response_id=self.response_id,
            parent_id=self.parent_id,
        )
        end_run = self.ctx.extras.pop(RUN_END_KEY, None)
        if end_run is not None:
            end_run(record)
        return record

    def _listing_steps(self) -> list[dict[str, Any]]:
        """A ``list_tools`` step for each server whose tools the run could not list (it ran without them)."""
        failures = self.ctx.extras.get(TOOL_LISTING_FAILURES) or []
        return [
            {
                "type": "list_tools",
                "round": 1,
                "server": f["server"],
                "outcome": "error",
                "error": f["message"],
            }
            for f in failures
        ]
