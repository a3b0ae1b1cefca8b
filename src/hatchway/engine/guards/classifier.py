"""The external classifier: a model the operator serves (Llama Guard, a prompt-injection classifier,
any chat model told to judge) asked about each tool result through the gateway's own providers, so
its key, timeouts and failover are those of ``providers[]``. Its answer is matched against
``unsafe_pattern``; a judge that fails or runs past ``timeout_seconds`` withholds the result unless
``fail_open``."""

from __future__ import annotations

import asyncio
import logging
import re

from hatchway.config.settings import ClassifierSettings
from hatchway.engine.context import RunContext
from hatchway.engine.guards.findings import Finding
from hatchway.engine.items import Message
from hatchway.engine.providers.base import ModelRequest
from hatchway.engine.providers.routing import ModelRouter
from hatchway.engine.run_log import Outcome, SideCallStep

log = logging.getLogger("hatchway.guards")
STEP = "guard_classifier"
"""The run-log step of each judgement (model, source, outcome, tokens, cost)."""


class Classifier:
    """One per gateway; each ``judge`` is one request to the judge model, counted in the run's
    tokens and spend (its record, ``/v1/usage``, limits and run budget) like the run's own calls."""

    def __init__(self, settings: ClassifierSettings, models: ModelRouter) -> None:
        self.settings = settings
        self.models = models
        self.unsafe = re.compile(settings.unsafe_pattern)

    async def judge(self, source: str, text: str, ctx: RunContext) -> Finding | None:
        """A ``classifier`` finding if the judge calls ``text`` unsafe (``unsafe``), or could not say
        (``unavailable``); None if it calls it safe."""
        settings = self.settings
        resolved = self.models.resolve(settings.model)
        request = ModelRequest(
            model=resolved.upstream_model,
            items=[
                Message(role="system", content=settings.prompt),
                Message(role="user", content=text[: settings.max_chars]),
            ],
            params={"max_tokens": 32, "temperature": 0},
        )
        try:
            async with asyncio.timeout(settings.timeout_seconds):
                response = await resolved.provider.request(request)
        except Exception as exc:  # any failure of the judge is the same verdict: not judged
            reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            log.warning("guard classifier %s on a result of %s: %s", settings.model, source, reason)
            ctx.run.report(SideCallStep(STEP, settings.model, source, Outcome.UNAVAILABLE))
            return Finding("classifier", "unavailable", f"the classifier {reason}")
        answer = (response.text or "").strip()
        unsafe = self.unsafe.search(answer) is not None
        outcome = Outcome.UNSAFE if unsafe else Outcome.SAFE
        ctx.run.report(SideCallStep(STEP, settings.model, source, outcome, response.usage))
        if unsafe:
            # The judge's own words, cut: what it says is bounded and says why (Llama Guard: "S1").
            return Finding("classifier", "unsafe", " ".join(answer.split())[:80], text)
        return None
