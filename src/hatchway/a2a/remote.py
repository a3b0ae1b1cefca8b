"""Remote A2A agents as ``spawn_subagent`` children (``a2a.remote_agents`` in hatchway.yaml;
docs/a2a.md, "Remote agents").

A child named ``a2a:<name>`` is a stored child response like a local one — in the run's tree, with
its input and its answer — whose work is done by the remote agent: discovered by its card, sent the
task with the SDK's client (returning at once), then read until it ends. The remote task's id is
written into the child's record as soon as it is known, so a restart neither loses it (the record
names it) nor repeats it (a child that was started is never started again: its parent ends
``failed``/interrupted as any run cut by a restart does).

Everything a peer can make the gateway hold is bounded: each reply it sends is read no further than
``max_response_bytes``; the wait is bounded by ``timeout_seconds`` and the run's deadline, after
which the remote task is cancelled; its answer is tool output (guarded and cut like any).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from hatchway.config.settings import RemoteA2AAgent, Settings
from hatchway.engine.context import RunContext
from hatchway.engine.tools.subagents.contract import ChildRequest, ChildResult
from hatchway.environment import env_value
from hatchway.errors import HatchwayError, InvalidRequest
from hatchway.ids import new_id
from hatchway.responses.store import ResponseEnding, ResponseRecord, ResponseStore, stored_error
from hatchway.tasks import TaskRegistry
from hatchway.vault.names import allowed_origin, origin_of
from hatchway.vault.store import Vault

PREFIX = "a2a:"


class RemoteAgentError(HatchwayError):
    """A remote A2A agent failed the delegation: unreachable, refused, too large, too slow, failed."""

    status_code = 502
    error_type = "server_error"
    default_code = "remote_agent_failed"


class _TooLarge(Exception):
    pass


@dataclass(frozen=True, slots=True)
class RemoteOutcome:
    state: str
    """``completed``, ``input-required``, ``auth-required``, ``failed``, ``canceled`` or ``rejected``."""
    text: str
    task_id: str | None
    context_id: str | None


class RemoteAgents:
    """The child runner for ``a2a:<name>`` models."""

    def __init__(self, settings: Settings, store: ResponseStore, vault: Vault, tasks: TaskRegistry) -> None:
        self.settings = settings
        self.store = store
        self.vault = vault
        self.tasks = tasks

    @staticmethod
    def handles(model: str) -> bool:
        return model.startswith(PREFIX)

    async def run_child(self, request: ChildRequest, ctx: RunContext) -> ChildResult:
        name = request.model[len(PREFIX) :]
        agent = self.settings.a2a.remote(name)
        if agent is None:
            raise InvalidRequest(f"no remote A2A agent '{name}' in hatchway.yaml's a2a.remote_agents")
        child_id = ctx.response_id = ctx.response_id or new_id("resp")  # its run scope's, if it has one
        record = ResponseRecord(
            id=child_id,
            org_id=ctx.org_id,
            status="in_progress",
            model=request.model,
            request={"remote_agent": name, "remote_url": agent.url},
            parent_response_id=request.parent_response_id,
            call_id=request.call_id,
            depth=ctx.depth,
            on_behalf_of=ctx.on_behalf_of,
        )
        task_input = {
            "type": "message",
            "id": new_id("msg"),
            "role": "user",
            "content": [{"type": "input_text", "text": request.task}],
        }
        await self.store.create(record, [task_input])
        with self.tasks.current(child_id):  # its lease renewed while the remote works
            try:
                outcome = await self._delegate(agent, request.task, ctx, child_id)
            except HatchwayError as exc:
                await self.store.finish(
                    child_id,
                    ResponseEnding(
                        status="failed",
                        output=[],
                        error=stored_error("server_error", exc.message, exc.code or "remote_agent_failed"),
                    ),
                )
                raise
        answer = {
            "type": "message",
            "id": new_id("msg"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": outcome.text, "annotations": []}],
        }
        await self.store.finish(child_id, ResponseEnding(status="completed", output=[answer]))
        if outcome.state == "completed":
            return ChildResult(response_id=child_id, output_text=outcome.text)
        if outcome.state in ("input-required", "auth-required"):
            # The remote agent asks: the question goes to this run's model, which asks its end user.
            return ChildResult(
                response_id=child_id,
                output_text=f"[the remote agent {name} asks ({outcome.state})] {outcome.text}",
            )
        raise RemoteAgentError(
            f"remote agent {name}: task {outcome.task_id} ended {outcome.state}: {outcome.text}"
        )

    async def _delegate(
        self, agent: RemoteA2AAgent, task: str, ctx: RunContext, child_id: str
    ) -> RemoteOutcome:
        from a2a.client import ClientConfig, create_client
        from a2a.client.errors import A2AClientError
        from a2a.types import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest
        from a2a.utils.errors import A2AError

        deadline = time.monotonic() + min(agent.timeout_seconds, max(ctx.remaining(), 0.0))
        headers = await self._auth_headers(agent, ctx)
        http = httpx.AsyncClient(
            transport=_Bounded(httpx.AsyncHTTPTransport(), agent.max_response_bytes),
            headers=headers,
            timeout=httpx.Timeout(min(agent.timeout_seconds, 60.0)),
            follow_redirects=False,
        )
        client = None
        remote_id: str | None = None
        try:
            try:
                config = ClientConfig(httpx_client=http, streaming=False, polling=True)
                client = await asyncio.wait_for(
                    create_client(agent.url, client_config=config), _left(deadline)
                )
                message = Message(message_id=new_id("msg"), role=Role.ROLE_USER, parts=[Part(text=task)])
                first = None
                async for event in client.send_message(SendMessageRequest(message=message)):
                    first = event
                    break
                if first is None:
                    raise RemoteAgentError(f"remote agent {agent.name} answered nothing")
                if first.HasField("message"):
                    return RemoteOutcome("completed", _parts_text(first.message.parts), None, None)
                current = first.task
                remote_id = current.id
                await self.store.note_request(
                    child_id, {"remote_task_id": current.id, "remote_context_id": current.context_id}
                )
                while not _settled(current.status.state):
                    if time.monotonic() >= deadline:
                        raise TimeoutError
                    await asyncio.sleep(min(agent.poll_seconds, _left(deadline)))
                    current = await asyncio.wait_for(
                        client.get_task(GetTaskRequest(id=remote_id)), _left(deadline)
                    )
                return _outcome(current)
            except TimeoutError:
                if client is not None and remote_id is not None:  # best effort: do not leave it working
                    try:
                        await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=remote_id)), 5)
                    except (A2AError, A2AClientError, httpx.HTTPError, TimeoutError, _TooLarge):
                        pass
                raise RemoteAgentError(
                    f"remote agent {agent.name} did not finish task {remote_id or '(not started)'} in time",
                    code="remote_timeout",
                ) from None
            except _TooLarge:
                raise RemoteAgentError(
                    f"remote agent {agent.name} sent a reply larger than {agent.max_response_bytes} bytes",
                    code="remote_too_large",
                ) from None
            except (A2AError, A2AClientError, httpx.HTTPError, ValueError) as exc:
                raise RemoteAgentError(
                    f"remote agent {agent.name}: {type(exc).__name__}: {str(exc)[:300]}"
                ) from None
        finally:
            if client is not None:
                await client.close()
            await http.aclose()

    async def _auth_headers(self, agent: RemoteA2AAgent, ctx: RunContext) -> dict[str, str]:
        if agent.auth is None:
            return {}
        if agent.auth.startswith("env:"):
            token = env_value(agent.auth[4:])
            if not token:
                raise RemoteAgentError(f"remote agent {agent.name}: {agent.auth} is not set")
            return {"authorization": f"Bearer {token}"}
        name = agent.auth.removeprefix("secret.")
        secret = await self.vault.get(ctx.org_id, name)
        if origin_of(agent.url) not in {allowed_origin(h) for h in secret.allowed_hosts}:
            host = urlsplit(agent.url).hostname
            raise RemoteAgentError(
                f"remote agent {agent.name}: secret '{name}' is not bound to {host} (its allowed_hosts: "
                f"{', '.join(secret.allowed_hosts) or 'none'})",
                code="secret_host_not_allowed",
            )
        return {"authorization": f"Bearer {secret.value}"}


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _settled(state: int) -> bool:
    from a2a.types import TaskState

    return state not in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_UNSPECIFIED,
    )


def _outcome(task: Any) -> RemoteOutcome:
    from a2a.types import TaskState

    names = {
        TaskState.TASK_STATE_COMPLETED: "completed",
        TaskState.TASK_STATE_INPUT_REQUIRED: "input-required",
        TaskState.TASK_STATE_AUTH_REQUIRED: "auth-required",
        TaskState.TASK_STATE_FAILED: "failed",
        TaskState.TASK_STATE_CANCELED: "canceled",
        TaskState.TASK_STATE_REJECTED: "rejected",
    }
    state = names.get(task.status.state, "failed")
    text = "\n".join(_parts_text(a.parts) for a in task.artifacts if a.parts)
    status = _parts_text(task.status.message.parts) if task.status.HasField("message") else ""
    if state != "completed" or not text:
        text = "\n".join(t for t in (status, text) if t)
    return RemoteOutcome(state, text, task.id, task.context_id)


def _parts_text(parts: Any) -> str:
    from google.protobuf.json_format import MessageToDict

    out = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            out.append(part.text)
        elif kind == "data":
            out.append(json.dumps(MessageToDict(part).get("data"), ensure_ascii=False))
        elif kind == "url":
            out.append(part.url)
    return "\n".join(out)


class _Bounded(httpx.AsyncBaseTransport):
    """A transport whose responses are read no further than ``limit`` bytes (httpx has no such
    limit of its own): a peer's endless or enormous reply raises ``_TooLarge`` as it is read."""

    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await response.aclose()
            raise _TooLarge
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedStream(response.stream, self.limit),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _BoundedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self.inner:
            read += len(chunk)
            if read > self.limit:
                raise _TooLarge
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()
