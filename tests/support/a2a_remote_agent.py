"""A remote A2A agent written with the official ``a2a-sdk`` (its request handler, task store and
routes), run as its own process on loopback for the outbound tests (tests/a2a/test_a2a_remote.py).

    python -m tests.support.a2a_remote_agent PORT [TOKEN]

What it does depends on the task's text: ``echo <x>`` answers ``echo: <x>`` after 0.3 s; ``fail``
fails; ``ask`` asks for input; ``forever`` works until cancelled; ``huge`` answers 8 MB. With
TOKEN, every call but the card needs ``Authorization: Bearer TOKEN``. ``GET /stats`` counts the
tasks each text started (so a test sees a task started once) and the cancels.
"""

from __future__ import annotations

import asyncio
import collections
import sys

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

STARTED: collections.Counter[str] = collections.Counter()
CANCELLED: list[str] = []


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input().strip()
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        STARTED[text] += 1
        if context.current_task is None:  # the SDK's handler wants the Task before its updates
            task = new_task_from_user_message(context.message)
            task.id, task.context_id = context.task_id, context.context_id
            await event_queue.enqueue_event(task)
        await updater.start_work()
        if text.startswith("echo "):
            await asyncio.sleep(0.3)
            await updater.add_artifact([Part(text=f"echo: {text[5:]}")], name="answer")
            await updater.complete()
        elif text == "fail":
            await updater.failed(updater.new_agent_message([Part(text="the remote tool broke")]))
        elif text == "ask":
            await updater.requires_input(
                updater.new_agent_message([Part(text="Which account, savings or checking?")])
            )
        elif text == "huge":
            await updater.add_artifact([Part(text="x" * 8_000_000)], name="answer")
            await updater.complete()
        elif text == "forever":
            return  # working until cancelled
        else:
            await updater.add_artifact([Part(text=f"done: {text}")], name="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        CANCELLED.append(context.task_id or "")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def app(port: int, token: str | None) -> Starlette:
    url = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="remote",
        description="A remote test agent.",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["test"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def stats(_: Request) -> JSONResponse:
        return JSONResponse({"started": dict(STARTED), "cancelled": len(CANCELLED)})

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        Route("/stats", stats),
    ]
    application = Starlette(routes=routes)
    if token:

        async def check(request: Request, call_next):  # type: ignore[no-untyped-def]
            if request.url.path.startswith("/.well-known/") or request.url.path == "/stats":
                return await call_next(request)
            if request.headers.get("authorization") != f"Bearer {token}":
                return Response(status_code=401)
            return await call_next(request)

        application.add_middleware(BaseHTTPMiddleware, dispatch=check)
    return application


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(
        app(port, sys.argv[2] if len(sys.argv) > 2 else None),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )
