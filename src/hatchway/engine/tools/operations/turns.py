"""Which question a user's reply answers: the turn of the conversation it was given in.

A "yes" is bound to the question it answers, never to whatever happens to be pending when the
request is processed (a double click, an SDK's retry or a second tab would otherwise confirm the
next operation a model opens). Two facts of the request bind it:

- **the user messages before the reply.** Each time an operation's question is put to the user,
  it is filed under the turn that got it: the conversation (organisation, agent, session) and the
  user messages of that request (``OperationQuestion``). A reply carries the conversation again;
  the user messages before it name that turn, however often the reply is sent.
- **the last assistant message the client sent** must end with that question: it is what the user
  saw. A client that sends no assistant message at all (only user messages) is bound by the turn
  alone; one that shows something else is not bound to that question.

A client may also echo the operation id it was given (``hatchway-operation-id``, the value of the
``x-hatchway-operation-id`` response header): as ``POST /v1/operations/{id}/confirm`` would, it names
an operation of the organisation and agent, and only that operation's end user can answer it.

Texts are compared as the reply classifier reads them (``confirmation.normalize``: case, accents,
punctuation and spacing do not matter), so a client that renders markdown or trims the question
still shows it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from hatchway.engine.context import RunContext
from hatchway.engine.items import Item, Message
from hatchway.engine.tools.operations.confirmation import normalize

ECHO_HEADER = "hatchway-operation-id"
"""A request header naming the operation whose question the reply answers."""


@dataclass(frozen=True, slots=True)
class Turn:
    """A user's new message and what binds it to a question."""

    reply: str
    """The user's new message."""
    before: str
    """The digest of the user messages before it: the turn whose question it answers."""
    through: str
    """The digest of the user messages up to it: a question asked in answer is filed under it."""
    shown: str | None
    """The last assistant message the client sent before it (None: the client sent none)."""
    echoed: str | None
    """The operation id the client echoed (``hatchway-operation-id``)."""

    @classmethod
    def bare(cls, reply: str) -> Turn:
        """A reply sent alone: no user message before it, no assistant message, no echoed id."""
        return cls(reply, turn_digest([]), turn_digest([normalize(reply)]), None, None)


def user_messages(items: Sequence[Item]) -> list[str]:
    """The text of every user message, normalised."""
    return [normalize(item.text) for item in items if isinstance(item, Message) and item.role == "user"]


def turn_digest(messages: list[str]) -> str:
    """The digest of a turn's user messages (already normalised)."""
    return hashlib.sha256(orjson.dumps(messages)).hexdigest()


def conversation_turn(items: Sequence[Item]) -> str:
    """The turn a request's conversation is at: a question asked in this run is filed under it."""
    return turn_digest(user_messages(items))


def read_turn(items: Sequence[Item], ctx: RunContext) -> Turn | None:
    """The reply a request ends with, and what binds it; None unless it ends with a user message."""
    last = items[-1] if items else None
    if not isinstance(last, Message) or last.role != "user":
        return None
    shown = next(
        (
            item.text
            for item in reversed(items[:-1])
            if isinstance(item, Message) and item.role == "assistant"
        ),
        None,
    )
    echoed = (ctx.request_headers.get(ECHO_HEADER) or "").strip() or None
    return Turn(last.text, conversation_turn(items[:-1]), conversation_turn(items), shown, echoed)


def turn_key(org_id: str, agent: str, session_key: str, turn: str) -> str:
    """Where a question asked in ``turn`` of this conversation is filed (``OperationQuestion.turn_key``)."""
    return hashlib.sha256("\0".join((org_id, agent, session_key, turn)).encode()).hexdigest()


def shows(shown: str, question: str | None, *, anywhere: bool = False) -> bool:
    """Whether an assistant message ends with ``question`` (what the user saw last is the question),
    or, ``anywhere``, holds it."""
    asked = normalize(question or "")
    if not asked:
        return False
    seen = f" {normalize(shown)} "
    return f" {asked} " in seen if anywhere else seen.endswith(f" {asked} ")
