"""An MCP server's sampling request (``sampling/createMessage``) answered by the gateway's model.

Only for plugins that allow it (``agent.allow_sampling``): the request's messages (text only) go to
the run's model, with at most ``MAX_SAMPLING_TOKENS`` tokens and within the run's deadline; the
tokens count in the run's usage like its own rounds. The server's model preferences are ignored:
the operator, not the server, chooses the model.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types

from hatchway.engine.context import RunContext
from hatchway.engine.items import Message
from hatchway.engine.providers.base import ModelRequest
from hatchway.engine.run_log import SideCallStep
from hatchway.errors import HatchwayError, ToolError

MAX_SAMPLING_PROMPT_CHARS = 32_000
"""The longest prompt (system prompt and messages) a server may have the gateway's model read."""
MAX_SAMPLING_TOKENS = 4096
"""The most tokens one sampling answer may use, whatever the server asks for."""
_STOP_REASONS = {"stop": "endTurn", "length": "maxTokens"}


class RunSampler:
    """Answers sampling requests with one model (the run's), through the gateway's providers."""

    def __init__(self, models: Any, model: str) -> None:
        self.models = models
        """``ModelRouter``."""
        self.model = model

    async def __call__(self, request: Any, ctx: RunContext) -> types.CreateMessageResult:
        params = request.params
        items: list[Message] = []
        size = len(params.system_prompt or "") + sum(
            len(getattr(m.content, "text", "") or "") for m in params.messages
        )
        if size > MAX_SAMPLING_PROMPT_CHARS:
            raise ToolError(
                f"the server's sampling request is {size} characters; at most {MAX_SAMPLING_PROMPT_CHARS}",
                code="mcp_input_unsupported",
            )
        if params.system_prompt:
            items.append(Message(role="system", content=params.system_prompt))
        for message in params.messages:
            content = message.content
            if not isinstance(content, types.TextContent):
                raise ToolError(
                    "the server's sampling request has non-text content, which the gateway does not sample",
                    code="mcp_input_unsupported",
                )
            items.append(Message(role=message.role, content=content.text))
        sampling: dict[str, Any] = {"max_tokens": min(int(params.max_tokens), MAX_SAMPLING_TOKENS)}
        if params.temperature is not None:
            sampling["temperature"] = params.temperature
        if params.stop_sequences:
            sampling["stop"] = list(params.stop_sequences)[:4]
        resolved = self.models.resolve(self.model)
        remaining = ctx.remaining()
        if remaining <= 0:
            raise ToolError(
                "no time is left in the run for the server's sampling request", code="tool_timeout"
            )
        try:
            async with asyncio.timeout(remaining):
                answer = await resolved.provider.request(
                    ModelRequest(model=resolved.upstream_model, items=items, params=sampling)
                )
        except TimeoutError:
            raise ToolError(
                "the run's deadline passed while sampling for the server", code="tool_timeout"
            ) from None
        except HatchwayError as exc:
            raise ToolError(
                f"sampling for the server failed: {ctx.redact(exc.message)}", code="mcp_sampling_failed"
            ) from None
        ctx.run.report(SideCallStep("sampling", self.model, usage=answer.usage))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=answer.text or ""),
            model=self.model,
            stop_reason=_STOP_REASONS.get(answer.finish_reason, answer.finish_reason),
        )
