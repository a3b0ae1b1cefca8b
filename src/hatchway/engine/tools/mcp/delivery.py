"""Whether a failed MCP tool call may be sent again: at most once, unless the tool is idempotent.

A call is retried when its request provably never reached the server. One that may have reached it
is retried only for a tool that is declared idempotent, by the plugin (``idempotent_tools``) or by
the server (``idempotentHint`` or ``readOnlyHint``); any other tool gets ``ToolOutcomeUnknown``, and
the model reads that the tool may or may not have acted. Listing tools is read-only and is retried
as any failure of it is.
"""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types as types

from hatchway.config.plugin import McpServerConfig
from hatchway.engine.tools.mcp.http import AnswerTooLarge, RequestScope
from hatchway.errors import ToolError, ToolOutcomeUnknown


def is_idempotent(server: McpServerConfig, tool: str, listed: Sequence[types.Tool] | None) -> bool:
    """Whether calling ``tool`` again is harmless: the plugin says so, or the server's listing does.

    The MCP spec calls annotations hints and warns against trusting those of untrusted servers.
    A hint here is trusted only for a retry of that same call on that same server, up to its
    ``max_retries``: all a false hint can cost is a repeat the server itself asked for.
    """
    if server.declares_idempotent(tool):
        return True
    found = next((t for t in listed or () if t.name == tool), None)
    hints = found.annotations if found is not None else None
    # A read-only tool does not modify its environment, so calling it again cannot add an effect.
    return hints is not None and bool(hints.idempotent_hint or hints.read_only_hint)


def may_have_reached(failure: ToolError, scope: RequestScope, *, sent: bool) -> bool:
    """Whether a call that failed with ``failure`` may have reached the tool anyway.

    ``sent`` says the call was handed to an open session. What proves it did not reach the tool:

    - no session: the connection or the handshake failed first (``sent`` is False);
    - the session had ended when the call was to be sent (``SessionEnded``, ``sent`` is False);
    - every request of the call failed before it was written: refused, unreachable, a TLS or
      egress failure, no pooled connection (``RequestScope.never_sent``).

    What does not:

    - a timeout, or a connection cut after the request was written (read errors, a closed stream,
      a stdio server that exited): the server may have run the tool and lost only the answer;
    - a 5xx: neither HTTP nor MCP says the request was not processed. A 500 may come from a tool
      that failed halfway; a 502 or 504 from a gateway that forwarded the request; a 503 too, as
      proxies answer it when their upstream reset after the request went through (Envoy's
      "upstream connect error or disconnect/reset before headers"). A 429 is no proof either
      (RFC 6585 says nothing of processing); it is a protocol error here, never retried;
    - an answer too large to read: it came from a tool that ran.

    A refusal (403, 404, a JSON-RPC error) is final and never retried, whatever this says. A 401 is
    the one refusal repeated, once, with fresh credentials: MCP's authorization rules make a server
    answer 401 to a request whose token it does not accept, before the request is processed.
    """
    if isinstance(scope.error, AnswerTooLarge):
        return True
    if not sent or not failure.transient:
        return False
    return not scope.never_sent()


def outcome_unknown(failure: ToolError) -> ToolOutcomeUnknown:
    """``failure`` as the model (or an operation) reads it: not retried, the tool may have acted.

    A failure the server reported precisely (an answer too large to read) keeps its code."""
    message = (
        f"{failure.message.rstrip('.')}. The request may have reached the tool, so it was not sent again: "
        "the server may or may not have acted; check before calling it again"
    )
    return ToolOutcomeUnknown(message, cause=failure, code=None if failure.transient else failure.code)
