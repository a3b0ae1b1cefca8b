"""An upstream tool's requests for input, put to the MCP client of the endpoint that called it.

In the chat loop the gateway answers an upstream's ``input_required`` itself (the end user answers
on a later turn, ``engine/tools/mcp/questions.py``). Behind an MCP endpoint the one who can answer
is the endpoint's own client, so the requests go to it:

- a 2026-07-28 client gets the upstream's ``inputRequests`` as the endpoint's own
  ``input_required`` result; the ``requestState`` it echoes is the endpoint's (sealed by the SDK's
  ``RequestStateBoundary``, bound to the caller) and carries the upstream's state, which is passed
  back to the upstream byte for byte with the client's ``inputResponses``;
- a 2025-11-25 client with a session is asked there and then (``elicitation/create``,
  ``sampling/createMessage``, ``roots/list`` on the request's stream), for what it declared it can
  answer; anything else fails the call with a tool error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from hatchway.engine.tools.mcp.answers import check_requested_schema, requested_schema
from hatchway.engine.tools.mcp.inputs import InputRound
from hatchway.errors import ToolError

_RESULT_OF = {
    "elicitation/create": types.ElicitResult,
    "sampling/createMessage": types.CreateMessageResult,
    "roots/list": types.ListRootsResult,
}
_CAPABILITY_OF = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


class InputRelayed(ToolError):
    """The upstream asked for input; the endpoint hands the round to its 2026-07-28 client."""

    default_code = "input_relayed"

    def __init__(self, round_: InputRound) -> None:
        super().__init__(f"{round_.server_id}: the tool asks for input")
        self.round = round_


@dataclass(slots=True)
class ClientSide:
    """What the endpoint's client can be asked, read off the request being handled."""

    session: Any
    """The SDK's ``ServerSession`` of the request."""
    request_id: Any
    protocol_version: str

    @classmethod
    def of(cls, request_ctx: Any) -> ClientSide:
        return cls(request_ctx.session, request_ctx.request_id, request_ctx.protocol_version)

    @property
    def modern(self) -> bool:
        """A 2026-07-28 client: input is asked with an ``input_required`` result."""
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def capabilities(self) -> dict[str, Any]:
        """What the client declared, as the upstream requests made on its behalf declare it."""
        declared = self.session.client_capabilities
        return declared.model_dump(mode="json", by_alias=True, exclude_none=True) if declared else {}

    def declares(self, capability: str) -> bool:
        capabilities = self.session.client_capabilities
        return capabilities is not None and getattr(capabilities, capability, None) is not None

    def can_elicit(self) -> bool:
        """Whether the client can be asked a form question at all (either revision)."""
        if not self.declares("elicitation"):
            return False
        return self.modern or self.session.can_send_request

    async def ask(self, request: Any) -> Any:
        """Put one server request to a 2025-11-25 client on this request's stream."""
        result_type = _RESULT_OF[request.method]
        return await self.session.send_request(
            request, result_type, metadata=ServerMessageMetadata(related_request_id=self.request_id)
        )


class RelayToClient:
    """An ``InputAnswerer`` for calls made through an MCP endpoint (see the module docstring)."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client

    async def answer(self, round_: InputRound) -> dict[str, Any]:
        for request in round_.requests.values():
            method = getattr(request, "method", "")
            capability = _CAPABILITY_OF.get(method)
            if capability is None or not self.client.declares(capability):
                raise ToolError(
                    f"{round_.server_id}: the tool asked for {method or 'an unknown kind of input'}, "
                    "which this MCP client did not declare it can answer",
                    code="mcp_input_unsupported",
                )
            if method == "elicitation/create" and (schema := requested_schema(request)):
                check_requested_schema(round_.server_id, schema)  # a password by form: never relayed
        if self.client.modern:
            raise InputRelayed(round_)
        if not self.client.session.can_send_request:
            raise ToolError(
                f"{round_.server_id}: the tool asked for input, and this request has no stream to ask on",
                code="mcp_input_unsupported",
            )
        return {key: await self.client.ask(request) for key, request in round_.requests.items()}


# -- the endpoint's own requestState (sealed by the SDK's boundary before it reaches the client) --


def relay_state(round_: InputRound) -> str:
    """The state of a relayed round: which server and tool, the round, the upstream's own state."""
    return orjson.dumps(
        {
            "kind": "relay",
            "server": round_.server_id,
            "tool": round_.tool,
            "round": round_.number,
            "state": round_.request_state,
        }
    ).decode()


def confirm_state(operation_id: str, digest: str | None) -> str:
    """The state of a confirmation asked with ``input_required``."""
    return orjson.dumps({"kind": "confirm", "operation": operation_id, "digest": digest}).decode()


def read_state(text: str | None) -> dict[str, Any] | None:
    """The endpoint's state back from the client (already verified by the boundary), or None."""
    if not text:
        return None
    try:
        state = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return state if isinstance(state, dict) and state.get("kind") in ("relay", "confirm") else None


def relayed_state(text: str | None) -> str | None:
    """The upstream's own state inside the endpoint's state of a relayed round, or None."""
    state = read_state(text)
    return state.get("state") if state is not None and state["kind"] == "relay" else None
