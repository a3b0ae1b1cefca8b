"""Who calls an A2A agent: the request the API layer authenticated, handed to the SDK's handler in
the call context's state."""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.utils.errors import InternalError

from hatchway.engine.context import RunContext

CALLER = "hatchway.caller"
"""The key of the ``Caller`` in a ``ServerCallContext``'s state."""


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated request: its run context (principal, end user, headers, deadline)."""

    ctx: RunContext

    @property
    def org_id(self) -> str:
        return self.ctx.principal.org_id

    @property
    def end_user(self) -> str | None:
        return self.ctx.on_behalf_of


def caller_of(context: ServerCallContext) -> Caller:
    caller = context.state.get(CALLER)
    if not isinstance(caller, Caller):  # the API layer always sets it: a call that got here unauthenticated
        raise InternalError(message="unauthenticated A2A call")
    return caller
