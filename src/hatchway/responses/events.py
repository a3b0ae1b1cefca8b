"""Responses streaming: loop events → the SDK's server-sent events, with one id and ordered numbers.

``ResponseStreamWriter`` turns what the loop does into ``response.*`` events and appends them to an
``EventLog``; HTTP streams read the log (from any ``starting_after``), so a background response can
be followed, dropped and resumed while it runs on this replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.items import FunctionCallOutput, Item, Message
from hatchway.engine.loop import LoopEvent, OutputTextDelta, ToolCallFinished, ToolCallStarted
from hatchway.ids import new_id
from hatchway.responses.items import record_of, wire_function_call, wire_mcp_call, wire_message


@dataclass
class EventLog:
    """Every event of one response stream, in order; readers wait for more until it closes."""

    events: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def append(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, starting_after: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Events with ``sequence_number > starting_after``, waiting for new ones until closed."""
        index = 0 if starting_after is None else starting_after + 1
        while True:
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.closed:
                return
            await self._changed.wait()


@dataclass
class _OpenMessage:
    item_id: str
    output_index: int
    text: str = ""


class ResponseStreamWriter:
    """Writes one response's events to an ``EventLog``; ``sequence_number`` counts from 0."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.error_events = True
        """False on a WebSocket, where an ``error`` event ends a turn: ``response.failed`` (which
        carries the error) is then the failure's only event."""
        self.sequence = 0
        self._next_index = 0
        self._message: _OpenMessage | None = None
        self._streamed_messages: list[_OpenMessage] = []
        self._announced: dict[str, int] = {}
        """item id → output_index of every item announced with ``output_item.added``."""
        self._done: set[str] = set()
        self._arguments_streamed: set[str] = set()

    def emit(self, event_type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": event_type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        self.log.append(event)
        return event

    def lifecycle(self, event_type: str, response: dict[str, Any]) -> None:
        self.emit(event_type, response=response)

    def error(
        self, code: str | None, message: str, param: str | None = None, *, error_type: str = "server_error"
    ) -> None:
        # Flat fields for OpenAI's SDK (ResponseErrorEvent), the same under ``error`` for the
        # Open Responses schema (ErrorStreamingEvent) and the WebSocket protocol.
        if not self.error_events:
            return
        details = {"type": error_type, "code": code, "message": message, "param": param}
        self.emit("error", code=code, message=message, param=param, error=details)

    # -- loop events -----------------------------------------------------------------------------

    def on_loop_event(self, event: LoopEvent) -> None:
        """Stream one loop event; the loop only starts tool calls the gateway runs (hosted ones)."""
        if isinstance(event, OutputTextDelta):
            self._text(event.text)
        elif isinstance(event, ToolCallStarted):
            # OpenAI's order: the item announced with empty arguments, in progress, the arguments
            # streamed, done; then completed/failed and output_item.done when it has run.
            self._close_message()
            record = record_of(event.call, hosted=True)  # assigns the call its mcp_… id
            if event.server:
                record["server_label"] = event.server
            item = wire_mcp_call(record, None)
            self._add(_in_progress(item))
            self._stream_mcp_arguments(item)
        elif isinstance(event, ToolCallFinished):
            call = record_of(event.call, hosted=True, result=event.result)
            output = FunctionCallOutput(call_id=event.call.call_id, output=event.result.output)
            item = wire_mcp_call(call, record_of(output, hosted=True, result=event.result))
            known = self._announced.get(item["id"])
            index = self._add(item) if known is None else known
            kind = "failed" if item["status"] == "failed" else "completed"
            self.emit(f"response.mcp_call.{kind}", item_id=item["id"], output_index=index)
            self._finish_item(item)

    def _text(self, delta: str) -> None:
        if self._message is None:
            item_id = new_id("msg")
            item = {
                "id": item_id,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            self._message = _OpenMessage(item_id, self._add(item))
            self._streamed_messages.append(self._message)
            self.emit(
                "response.content_part.added",
                item_id=item_id,
                output_index=self._message.output_index,
                content_index=0,
                part=_text_part(""),
            )
        self._message.text += delta
        self.emit(
            "response.output_text.delta",
            item_id=self._message.item_id,
            output_index=self._message.output_index,
            content_index=0,
            delta=delta,
            logprobs=[],
        )

    def _close_message(self) -> None:
        message, self._message = self._message, None
        if message is None:
            return
        common = {"item_id": message.item_id, "output_index": message.output_index, "content_index": 0}
        self.emit("response.output_text.done", **common, text=message.text, logprobs=[])
        self.emit("response.content_part.done", **common, part=_text_part(message.text))
        record = {"type": "message", "id": message.item_id, "role": "assistant", "content": message.text}
        self._finish_item(wire_message(record))

    def _add(self, item: dict[str, Any]) -> int:
        index = self._next_index
        self._next_index += 1
        self._announced[item["id"]] = index
        self.emit("response.output_item.added", output_index=index, item=item)
        return index

    def _finish_item(self, item: dict[str, Any]) -> None:
        self._done.add(item["id"])
        self.emit("response.output_item.done", output_index=self._announced[item["id"]], item=item)

    # -- the end ---------------------------------------------------------------------------------

    def claim_message_ids(self, new_items: list[Item]) -> None:
        """Give the run's assistant messages the ids they were streamed under."""
        self._close_message()
        streamed = list(self._streamed_messages)
        for item in new_items:
            if isinstance(item, Message) and item.role == "assistant" and streamed:
                if item.text == streamed[0].text:
                    item.id = streamed.pop(0).item_id

    def finish(self, output: list[dict[str, Any]]) -> None:
        """Announce and complete whatever the final output holds that was not streamed yet."""
        self._close_message()
        for item in output:
            if item["id"] in self._done:
                continue
            if item["id"] not in self._announced:
                self._add(_in_progress(item))
            self._stream_body(item)
            self._finish_item(item)

    def _stream_body(self, item: dict[str, Any]) -> None:
        index = self._announced[item["id"]]
        if item["type"] == "message":
            text = item["content"][0]["text"] if item["content"] else ""
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            self.emit("response.content_part.added", **common, part=_text_part(""))
            if text:
                self.emit("response.output_text.delta", **common, delta=text, logprobs=[])
            self.emit("response.output_text.done", **common, text=text, logprobs=[])
            self.emit("response.content_part.done", **common, part=_text_part(text))
        elif item["type"] == "function_call":
            common = {"item_id": item["id"], "output_index": index}
            if item["arguments"]:
                self.emit("response.function_call_arguments.delta", **common, delta=item["arguments"])
            self.emit(
                "response.function_call_arguments.done",
                **common,
                arguments=item["arguments"],
                name=item["name"],
            )
        elif item["type"] == "mcp_call":
            if item["id"] not in self._arguments_streamed:
                self._stream_mcp_arguments(item)
            kind = "failed" if item["status"] == "failed" else "completed"
            self.emit(f"response.mcp_call.{kind}", item_id=item["id"], output_index=index)

    def _stream_mcp_arguments(self, item: dict[str, Any]) -> None:
        """OpenAI's order for an ``mcp_call`` announced (``output_item.added``) with empty arguments:
        in progress, the arguments streamed, done; completed or failed once it has run."""
        self._arguments_streamed.add(item["id"])
        common = {"item_id": item["id"], "output_index": self._announced[item["id"]]}
        self.emit("response.mcp_call.in_progress", **common)
        if item["arguments"]:
            self.emit("response.mcp_call_arguments.delta", **common, delta=item["arguments"])
        self.emit("response.mcp_call_arguments.done", **common, arguments=item["arguments"])


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] == "message":
        return {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        return wire_function_call({**item, "arguments": ""}, status="in_progress")
    if item["type"] == "mcp_call":
        return {**item, "arguments": "", "status": "in_progress", "output": None, "error": None}
    return item


def terminal_event(status: str) -> str:
    return {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
        status, "response.failed"
    )
