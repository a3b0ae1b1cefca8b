"""A2A's shapes from Hatchway's: a stored response as a ``Task``, its stream events as task updates,
and an A2A ``Message`` as the Responses input it becomes.

A task's state follows its response: ``queued`` is *submitted*, ``in_progress`` *working*,
``completed`` (and ``incomplete``, an answer cut short by a limit) *completed* — or
*input-required* when the run left a transactional operation awaiting its end user's confirmation
(the question is the status message) — ``failed`` *failed*, ``cancelled`` *canceled*; a refusal
before any response (a limit, a budget) is *rejected*. Its answer is one artifact, ``answer``, of the
response's output text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from google.protobuf.json_format import MessageToDict

from hatchway.a2a.store import A2ATaskRecord, StateFilter
from hatchway.engine.tools.payloads import CONNECT_INTRO
from hatchway.responses.store import ResponseRecord

ANSWER = "answer"
"""The artifact id of a task's answer."""

MAX_INPUT_CHARS = 1_000_000
"""A message's parts, as text, past which it is refused (the Responses request's own bound)."""

STATES = {
    "queued": TaskState.TASK_STATE_SUBMITTED,
    "in_progress": TaskState.TASK_STATE_WORKING,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "incomplete": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
}
REFUSALS = {
    "rejected": TaskState.TASK_STATE_REJECTED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
}
ENDED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
"""Terminal states: a message naming such a task is refused, a stream of it ends."""

FILTERS = {
    TaskState.TASK_STATE_SUBMITTED: StateFilter(statuses=("queued",)),
    TaskState.TASK_STATE_WORKING: StateFilter(statuses=("in_progress",)),
    TaskState.TASK_STATE_COMPLETED: StateFilter(statuses=("completed", "incomplete"), asking=False),
    TaskState.TASK_STATE_INPUT_REQUIRED: StateFilter(statuses=("completed",), asking=True),
    TaskState.TASK_STATE_FAILED: StateFilter(statuses=("failed",), refusals=("failed",)),
    TaskState.TASK_STATE_CANCELED: StateFilter(statuses=("cancelled",), refusals=("canceled",)),
    TaskState.TASK_STATE_REJECTED: StateFilter(refusals=("rejected",)),
}
"""``ListTasks``' ``status`` filter, as ``state_of`` decides a state (no task is auth-required yet)."""

TERMINAL_EVENTS = {"response.completed", "response.failed", "response.incomplete", "response.cancelled"}


def input_of(message: Message) -> list[dict[str, Any]]:
    """The Responses input of a user's message: its text parts as text, its data parts as JSON."""
    if message.role == Role.ROLE_AGENT:
        raise InvalidParamsError(message="message.role: a task is sent the user's messages (ROLE_USER)")
    texts = []
    for i, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part)["data"], ensure_ascii=False))
        elif kind is None:  # a kind the SDK does not know (A2A 0.3's `file`, a newer one): dropped
            raise ContentTypeNotSupportedError(
                message=f"message.parts[{i}]: a part of a kind this agent does not read; send text or data"
            )
        else:
            raise ContentTypeNotSupportedError(
                message=f"message.parts[{i}]: {kind} parts are not supported; send text or data"
            )
    text = "\n".join(texts)
    if not text.strip():
        raise InvalidParamsError(message="message.parts: no text or data to send")
    if len(text) > MAX_INPUT_CHARS:
        raise InvalidParamsError(message=f"message.parts: longer than {MAX_INPUT_CHARS} characters")
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]


def state_of(
    task: A2ATaskRecord, response: ResponseRecord | None, *, asks: bool = False, authorize: bool = False
) -> TaskState:
    """``asks``: the response's run left an operation awaiting confirmation; ``authorize``: it
    stopped for the end user to authorize a per-user OAuth server."""
    if response is None or (task.refusal or {}).get("state") == "canceled":
        return REFUSALS[(task.refusal or {}).get("state", "failed")]
    if asks and response.status == "completed":
        return TaskState.TASK_STATE_INPUT_REQUIRED
    if authorize and response.status == "completed":
        return TaskState.TASK_STATE_AUTH_REQUIRED
    return STATES.get(response.status, TaskState.TASK_STATE_FAILED)


WAITING = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
"""Interrupted states: the end user's next message on the task goes on with it."""


def stopped_for_authorization(outputs: list[dict[str, Any]], base_url: str | None) -> bool:
    """The run ended on the gateway's own answer asking the end user to authorize a per-user OAuth
    server: its last item is that message, with a consent link of this gateway (``base_url``)."""
    if not outputs or base_url is None:
        return False
    last = outputs[-1]
    if last.get("type") != "message" or last.get("role") != "assistant":
        return False
    text = answer_text([last])
    return text.startswith(CONNECT_INTRO) and f"{base_url.rstrip('/')}/oauth/connect/" in text


def task_of(
    task: A2ATaskRecord,
    response: ResponseRecord | None,
    *,
    inputs: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    history_length: int | None = None,
    include_artifacts: bool = True,
    question: str | None = None,
    base_url: str | None = None,
) -> Task:
    """The A2A Task of ``task``, its state from ``response``; with its items, its history (the
    user's messages and the agent's, the last ``history_length``) and its answer. ``question``: the
    confirmation the run asks for (the task is then input-required, the question its status). A run
    stopped for a per-user OAuth grant is auth-required, its answer (the consent link) its status."""
    authorize = (
        question is None and response is not None and stopped_for_authorization(outputs or [], base_url)
    )
    state = state_of(task, response, asks=question is not None, authorize=authorize)
    status = TaskStatus(state=state)
    status.timestamp.FromDatetime(_when(task, response))
    note = question or (answer_text(outputs or []) if authorize else None) or _status_text(task, response)
    if note:
        status.message.CopyFrom(agent_message(task, note))
    result = Task(id=task.id, context_id=task.context_id, status=status)
    if response is not None:
        result.metadata.update({"hatchway_response_id": response.id, "hatchway_status": response.status})
    text = answer_text(outputs or [])
    if include_artifacts and text and state in ENDED:
        result.artifacts.append(answer_artifact(text))
    if history_length != 0:
        history = [
            *_history(task, inputs or [], Role.ROLE_USER),
            *_history(task, outputs or [], Role.ROLE_AGENT),
        ]
        result.history.extend(history[-history_length:] if history_length else history)
    return result


def answer_artifact(text: str) -> Artifact:
    return Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=text)])


def agent_message(task: A2ATaskRecord, text: str) -> Message:
    return Message(
        message_id=f"msg_{task.id}_status",
        context_id=task.context_id,
        task_id=task.id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def answer_text(outputs: Iterable[dict[str, Any]]) -> str:
    """The text of the assistant's messages of a response's output."""
    return "\n".join(_texts(outputs, "output_text"))


def status_update(task: A2ATaskRecord, state: TaskState, text: str | None = None) -> TaskStatusUpdateEvent:
    event = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=TaskStatus(state=state))
    event.status.timestamp.GetCurrentTime()
    if text:
        event.status.message.CopyFrom(agent_message(task, text))
    return event


def text_update(task: A2ATaskRecord, delta: str, *, first: bool) -> TaskArtifactUpdateEvent:
    """A piece of the answer as it is written: the first piece opens the artifact, the next append."""
    return TaskArtifactUpdateEvent(
        task_id=task.id,
        context_id=task.context_id,
        artifact=Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=delta)]),
        append=not first,
    )


def _texts(items: Iterable[dict[str, Any]], kind: str) -> list[str]:
    found = []
    for item in items:
        if item.get("type") == "message":
            content = item.get("content")
            if isinstance(content, str):
                found.append(content)
            elif isinstance(content, list):
                found.extend(
                    c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == kind
                )
    return [t for t in found if t]


def _history(task: A2ATaskRecord, items: list[dict[str, Any]], role: Role) -> list[Message]:
    kind = "input_text" if role == Role.ROLE_USER else "output_text"
    messages = []
    for i, item in enumerate(items):
        if item.get("type") != "message" or item.get("role") not in ("user", "assistant"):
            continue
        text = "\n".join(_texts([item], kind))
        if text:
            messages.append(
                Message(
                    message_id=str(item.get("id") or f"{task.id}_{role}_{i}"),
                    context_id=task.context_id,
                    task_id=task.id,
                    role=role,
                    parts=[Part(text=text)],
                )
            )
    return messages


def _status_text(task: A2ATaskRecord, response: ResponseRecord | None) -> str | None:
    if response is None:
        return (task.refusal or {}).get("message")
    if response.status == "failed" and response.error:
        return str(response.error.get("message") or "the run failed")
    if response.status == "incomplete" and response.incomplete_details:
        return f"incomplete: {response.incomplete_details.get('reason', 'cut short')}"
    return None


def _when(task: A2ATaskRecord, response: ResponseRecord | None) -> datetime:
    """When the status last changed (``store._status_time``, the order of ``ListTasks``)."""
    if response is None or task.refusal:
        return task.updated_at
    return response.completed_at or response.updated_at
