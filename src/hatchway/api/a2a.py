"""``/a2a/<agent>``: each published agent (``agents[].a2a.publish``) as an A2A 1.0 agent.

Per agent: the Agent Card at ``/a2a/<agent>/.well-known/agent-card.json`` (public, as A2A wants a
card to be), JSON-RPC at ``POST /a2a/<agent>`` and HTTP+JSON under ``/a2a/<agent>/rest``. The SDK's
routes parse, answer and stream both bindings; this layer authenticates first (a Hatchway key, as
every inference route; ``X-On-Behalf-Of`` names the end user) and hands the SDK the caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from a2a.server.context import ServerCallContext
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.types import Task
from starlette.requests import Request
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from hatchway.a2a.caller import CALLER, Caller
from hatchway.a2a.cards import PREFIX, agent_card, card_path, jsonrpc_path, rest_path
from hatchway.a2a.handler import AgentTasks
from hatchway.a2a.push import PushNotifier
from hatchway.a2a.push_configs import PushConfigs
from hatchway.a2a.store import A2ATaskRecord, A2ATasks
from hatchway.a2a.streams import StreamSlots
from hatchway.api.auth import admit, source_of
from hatchway.api.context import header_dict
from hatchway.api.errors import error_response
from hatchway.engine.context import RunContext
from hatchway.environment import env_value
from hatchway.errors import HatchwayError, NotFound
from hatchway.gateway import Gateway

logger = logging.getLogger(__name__)

_CREDENTIALS = frozenset({"authorization", "cookie", "x-api-key", "proxy-authorization"})

ROUTE = "/a2a/{agent}"
"""The route every A2A call is admitted on (``access/roles.py``): an ``app`` key's."""


class _CallerContext(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller this layer authenticated."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER] = request.scope["state"][CALLER]
        # The SDK reads A2A-Version from its copy of the headers; credentials stay out of it.
        headers = context.state.get("headers", {})
        context.state["headers"] = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIALS}
        return context


def _signing_key(ref: str | None) -> Callable[[], bytes | None]:
    """``a2a.push_signing_secret`` (``env:NAME``), read at each notification; None when unset."""

    def key() -> bytes | None:
        value = env_value(ref[4:]) if ref is not None else None
        return value.encode() if value else None

    return key


class A2AAgents:
    """The ASGI app of every published agent, mounted at ``/a2a/``."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        tasks = A2ATasks(gateway.db)
        base_url = gateway.settings.public_base_url or "http://127.0.0.1:8080"
        self.cards: dict[str, Router] = {}
        self.agents: dict[str, Router] = {}
        builder = _CallerContext()
        # Push URLs are the callers': the egress rule of inline plugins applies to them.
        self.push = PushNotifier(
            PushConfigs(gateway.db, gateway.vault),
            allow_private=gateway.settings.allow_private_mcp_urls,
            signing_key=_signing_key(gateway.settings.a2a.push_signing_secret),
            claim_seconds=gateway.settings.a2a.push_claim_seconds,
        )
        self.handlers: dict[str, AgentTasks] = {}
        streams = StreamSlots(gateway.settings.a2a.max_streams_per_organisation)  # every agent's
        for agent in gateway.settings.agents:
            if not agent.a2a.publish:
                continue
            handler = AgentTasks(
                agent.name,
                gateway.responses,
                tasks,
                gateway.operations,
                asks=agent.tools is not None,
                streams=streams,
                push=self.push,
                base_url=gateway.settings.public_base_url,
            )
            self.handlers[agent.name] = handler
            self.cards[agent.name] = Router(
                create_agent_card_routes(agent_card(agent, base_url), card_url=card_path(agent.name))
            )
            self.agents[agent.name] = Router(
                [
                    *create_jsonrpc_routes(
                        handler, rpc_url=jsonrpc_path(agent.name), context_builder=builder
                    ),
                    *create_rest_routes(handler, context_builder=builder, path_prefix=rest_path(agent.name)),
                ]
            )

    async def keep_announcing(self) -> None:
        """Every ``a2a.push_sweep_seconds``, the push notifications owed and not sent (``push.py``):
        what a replica that died, or stopped, left untold. Runs on every replica."""
        every = self.gateway.settings.a2a.push_sweep_seconds
        while True:
            try:
                await self.push.sweep(self._snapshot_of)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away for a moment: the next sweep tries again
                logger.warning("a2a push sweep failed: %s", type(exc).__name__)
            await asyncio.sleep(every)

    async def _snapshot_of(self, task: A2ATaskRecord) -> Task | None:
        handler = self.handlers.get(task.agent)
        return None if handler is None else await handler.snapshot(task)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"][len(PREFIX) :].split("/", 1)[0]
        if scope["path"] == card_path(name) and name in self.cards:
            await self.cards[name](scope, receive, send)
            return
        try:
            headers = header_dict(scope["headers"])
            principal = await admit(
                self.gateway, scope["headers"], headers, scope["method"], ROUTE, source_of(scope)
            )
            if name not in self.agents:  # after the key: no telling which agents exist to strangers
                raise NotFound(f"no A2A agent '{name}'", param="agent")
            ctx = RunContext.from_headers(
                principal,
                headers,
                deadline_seconds=self.gateway.settings.loop_deadline_seconds,
                known_secrets=self.gateway.models.secrets,
            )
        except HatchwayError as exc:
            response = error_response(exc)
            if exc.status_code == 401:
                response.headers["www-authenticate"] = 'Bearer realm="hatchway"'
            await response(scope, receive, send)
            return
        scope = {**scope, "state": {**scope.get("state", {}), CALLER: Caller(ctx)}}
        await self.agents[name](scope, receive, send)
