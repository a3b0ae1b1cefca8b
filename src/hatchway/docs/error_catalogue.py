"""docs/errors.md: every error ``type``/``code`` with its HTTP status (from the class that carries it)
and what it means. Codes come from ``error_codes.scan()``; their meanings are written here, and a
test fails when a code in the source has no meaning below or a meaning names a code no longer used.
"""

from __future__ import annotations

from collections import defaultdict

from hatchway.docs.error_codes import CodeUse, error_classes, scan
from hatchway.errors import ToolError

MEANINGS: dict[str, str] = {
    # -- HTTP: the caller's request -------------------------------------------------------------
    "invalid_request": "The body or a parameter is malformed or contradictory; `param` names the field path "
    "(`messages[0].role`).",
    "invalid_json": "The request body is not valid JSON.",
    "item_not_found": "An `item_reference` input item names no item this organisation has stored.",
    "unsupported_tool": "A Responses tool of a type OpenAI runs itself (`web_search`, `file_search`…) "
    "with `hosted_tools: refuse`; by default such tools are accepted and not offered to the model.",
    "invalid_config": "A configuration file (or an inline plugin) is invalid; the message lists each "
    "field path.",
    "invalid_plugin": "The `hatchway-mcp-plugin` (or `floopy-mcp-plugin`) header is not valid base64 "
    "plugin YAML, goes past one of its limits (size, nesting, nodes, parse time, aliases: the message "
    "names it; see [security.md](security.md#limits)), or is sent with an agent that has its own plugin.",
    "invalid_call_id": "A `function_call_output` answers no pending call of the previous response.",
    "missing_call_output": "A function call of the previous response was left without its "
    "`function_call_output`.",
    "invalid_encrypted_content": "A compaction item was made by another organisation or gateway, or altered.",
    "invalid_secret_name": "A secret name is not `^[A-Za-z0-9_-]{1,64}$`.",
    "invalid_secret_ref": "A secret reference is not `secret.<name>`.",
    "invalid_host": "An entry of a secret's `allowed_hosts` is not a host name.",
    "invalid_api_key": "The `Authorization: Bearer` key is missing, unknown or revoked.",
    "invalid_token": "An MCP endpoint in OAuth resource-server mode refused the access token: another "
    "issuer or audience, expired, a bad signature, a missing scope, or inactive (docs/mcp-endpoints.md).",
    "forbidden": "Authenticated, but this key may not do that.",
    "insufficient_role": "The key's (or signed-in person's) role is not granted this route, model or MCP "
    'endpoint; the message names the role needed (docs/access.md, "Roles").',
    "expired_api_key": "The key is past its `expires_at`, or past the grace period of a rotation "
    "(`access.key_rotation_grace_seconds`).",
    "invalid_user_token": "The organisation requires verified end users and the user token "
    "(`X-Hatchway-User-Token`) is missing, expired, signed by an unpublished key, or for another issuer "
    'or audience; the message says which (docs/access.md, "Verified end users").',
    "end_user_mismatch": "`X-On-Behalf-Of` names another end user than the verified user token's subject.",
    "end_user_not_verified": "`X-On-Behalf-Of` was sent without a user token to an organisation that "
    "accepts only verified end users.",
    "session_expired": "The SSO session cookie names no live session: signed out (on any replica), past "
    "`access.sso.session_seconds`, unused for `idle_seconds`, or unknown. Sign in again.",
    "csrf_failed": "A change (POST, PUT, PATCH, DELETE) made with the SSO session cookie lacks the session's "
    "`X-CSRF-Token` (`GET /ui/session` gives it to the dashboard); a key in `Authorization` needs none.",
    "sso_state_invalid": "An SSO callback's `state` is missing, altered, expired, already used, or was "
    "issued to another browser (login CSRF): sign in again from the dashboard.",
    "sso_failed": "The identity provider refused the sign-in (its code was not accepted), or its ID token "
    "could not be verified (signature, issuer, audience, expiry, nonce).",
    "sso_no_role": "The identity provider signed the person in, but none of their groups is mapped to a role "
    "(`access.sso.role_mappings`): no session is made.",
    "egress_denied": "An inline plugin's server or token URL resolves to a loopback, private, link-local or "
    "metadata address, or runs a stdio command (set `allow_private_mcp_urls` on trusted networks); "
    "during a tool call, the connection was refused for the same reason.",
    "token_source_not_allowed": "A plugin sent in the request names an `env:` or `file:` assertion or "
    "subject token: those read the gateway's own environment and are for plugins in hatchway.yaml only "
    "(use `secret.<name>`).",
    "secret_host_not_allowed": "An inline plugin would send a secret to a host outside the secret's "
    "`allowed_hosts`.",
    "not_found": "The object does not exist in this organisation (other organisations' objects are "
    "not found too).",
    "model_not_found": "No model, `<provider>/<model>` or `agent:<name>` of that name.",
    "previous_response_not_found": "`previous_response_id` names no stored response of this organisation "
    "(over WebSocket, the same code in an `error` event).",
    "secret_not_found": "No secret of that name in this organisation (a provider's `secret.<name>` is "
    "read from the `system` organisation).",
    "conflict": "The object's state does not allow this action.",
    "agent_not_configured": "The operation's agent is no longer in hatchway.yaml, so it cannot be executed.",
    "agent_without_plugin": "The operation's agent has no plugin, so it cannot be executed.",
    "operation_not_pending": "The operation is no longer awaiting confirmation; it is not executed again "
    "(the body carries it as it is: its outcome, waited for while it executes).",
    "operation_already_confirmed": "Another confirmation won the race and executed the operation once (the "
    "body carries its outcome).",
    "operation_cancelled": "The operation was cancelled before this confirmation.",
    "operation_expired": "The operation's confirmation expired (`confirmation_ttl_seconds`).",
    "operation_not_cancellable": "The operation is executing or finished; it can no longer be cancelled.",
    "approver_not_verified": "An approval is decided by a verified person: a session signed in with SSO, or "
    "a key with the approver's verified user token. A key alone, or `X-On-Behalf-Of`, is not proof.",
    "not_an_approver": "The person may not decide this approval: not in the group or role its policy "
    "names, the requester themselves, or a viewer (the message says which). Nothing was recorded.",
    "operation_not_awaiting_approval": "The operation does not await approval (decided, executed, "
    "cancelled or timed out already); the body carries it as it is.",
    "confirmation_not_yours": "The operation was requested for another end user (`X-On-Behalf-Of`), or for "
    "none: only that end user may confirm or cancel it; it stays pending.",
    "arguments_digest_mismatch": "The `arguments_digest` sent does not match the arguments awaiting "
    "confirmation (or the stored arguments were altered).",
    "request_too_large": "The request body passed `max_request_body_bytes` (16 MiB by default); it was "
    "refused while being read, before anything of it was forwarded or stored, and the connection closed.",
    "request_headers_too_large": "The request line and headers passed `max_request_header_bytes` (64 KiB "
    "by default); refused before authentication, and the connection closed.",
    "rate_limit_exceeded": "A `requests_per_minute` of `limits:` in hatchway.yaml is reached; `param` names "
    "it (`limits.keys.<name>.requests_per_minute`), `retry-after` says when to retry (docs/limits.md). "
    "As a failed response's `error`: the upstream answered 429.",
    "tokens_limit_exceeded": "The tokens this request reserves (its `max_tokens` and its input) do not fit "
    "in a `tokens_per_minute` of `limits:`; `param` names it, `retry-after` says when to retry.",
    "concurrency_limit_exceeded": "A `concurrent_runs` of `limits:` is reached: as many runs of that scope "
    "are in progress; `param` names it. Retry when one ends.",
    "budget_exceeded": "A `budget_usd_per_day` or `budget_usd_per_month` of `limits:` is spent; `param` "
    "names it, `retry-after` and `x-hatchway-budget-reset` say when its UTC day or month ends.",
    "client_gone": "Not sent: the client went away before the answer. The run log records the run "
    "with HTTP status 499.",
    # -- HTTP: the gateway or its upstream --------------------------------------------------------
    "unavailable": "A component this request needs is not running in this process, or cannot be "
    "reached: Redis, for the limits with `limits.on_redis_failure: refuse` (retry after `retry-after`).",
    "database_unavailable": "The database could not be reached (down, refusing connections, cut mid-query); "
    "retry after the `retry-after` seconds.",
    "sso_provider_unavailable": "The SSO identity provider could not be reached, its discovery document "
    "names another issuer than `access.sso.issuer`, or the client secret is not set.",
    "remote_agent_failed": "A remote A2A agent (`a2a.remote_agents`) failed a delegation: unreachable, "
    "refused, or its task ended failed, canceled or rejected; the model gets it as `ok: false` from "
    "`spawn_subagent`.",
    "remote_timeout": "A remote A2A agent's task did not end within `timeout_seconds` (or the run's "
    "deadline); the remote task was cancelled.",
    "remote_too_large": "A remote A2A agent sent a reply larger than `max_response_bytes`.",
    "task_not_found": "An A2A task id that is not this organisation's and end user's on this agent (or does "
    "not exist); over A2A it is answered as the protocol's TaskNotFoundError.",
    "schema_not_current": "Not an HTTP answer: `hatchway serve` or `hatchway worker` with "
    "`migrate_on_start: false` found the database schema behind (or ahead of) its release and exits 1; "
    "run `hatchway migrate` (docs/deploy.md).",
    "internal_error": "A bug in the gateway. The response (or stored response) says only this; the "
    "gateway's log has the details.",
    "upstream_error": "The upstream model provider failed.",
    "upstream_unavailable": "The upstream could not be reached (refused, no route, no API key), closed the "
    "connection before its answer ended, or reported an error after answering 200 (its message quoted).",
    "upstream_malformed": "The upstream answered 200 with something that is not a completion: a body or a "
    "stream chunk of the wrong shape (the message names the field path, e.g. "
    "`choices[0].message.content`), not JSON, not UTF-8, not decompressible, or an event stream with no "
    "chunk. Mid-stream, an error chunk and `[DONE]` (Chat) or `error` and `response.failed` (Responses).",
    "upstream_timeout": "The upstream did not answer within the provider's `timeout_seconds`.",
    "vault_error": "A secret could not be stored or read.",
    "decryption_failed": "A secret could not be decrypted: wrong master key, or tampered data.",
    "master_key_invalid": "The master key is missing, malformed, not 32 bytes, or its file is readable by "
    "group or others.",
    # -- Tool results: what the model reads ------------------------------------------------------
    "tool_error": "The MCP tool reported an error (`isError`); never retried.",
    "tool_failed": "The tool raised an unexpected exception; the loop goes on.",
    "tool_timeout": "No answer within the server's `timeout_ms`, after the retries: while connecting (the "
    "call was never sent), or from a tool declared idempotent.",
    "tool_outcome_unknown": "The call failed after its request may have reached the server (no answer within "
    "`timeout_ms`, a cut connection, a 5xx): the tool may or may not have acted, and it was not sent again "
    "(tools declared idempotent are retried). An operation's execution is INTERRUPTED and never re-run.",
    "timeout": "The run's deadline (`loop_deadline_seconds`) passed before this tool finished.",
    "unknown_tool": "The model called a tool that is not offered to this run.",
    "result_withheld": "An MCP endpoint withheld an upstream's result that held a secret and no longer "
    "validated once redacted: the secret is never sent to make it valid.",
    "tool_withheld": "An MCP endpoint's client called a tool whose definition drifted from its pin "
    "(`tool_drift: block`): withheld until approved, and never routed to another server's tool of its name.",
    "invalid_arguments": "The call's arguments are not a JSON object (for `spawn_subagent`: no non-empty "
    "`task`, or `max_depth` reached).",
    "max_tool_calls_reached": "The run reached `max_tool_calls` (the response's) or "
    "`max_tool_calls_per_run` (the gateway's); this call was not run.",
    "too_many_tool_calls": "The round asked for more calls than `max_tool_calls_per_round`; this one was "
    "not run (the model may call it again in the next round).",
    "tool_result_too_large": "The MCP server's answer passed `max_tool_result_bytes` and was not read.",
    "not_run": "The run ended (e.g. at `max_rounds`) before this gateway-run call ran.",
    "confirmation_pending": "Another transactional call of this turn is waiting for the user's confirmation; "
    "one question per turn.",
    "missing_arguments": "A `requires` argument is missing: the model is told which to ask the user for.",
    "out_of_scope": "The validator answered `eligible: false`; the operation is OUT_OF_SCOPE.",
    "validator_failed": "The pre-validation tool failed or answered malformed (with `fail_open: false`, "
    "the operation FAILED).",
    "mcp_server_error": "The MCP server failed.",
    "mcp_unreachable": "The MCP server could not be reached (after the retries).",
    "mcp_connection_lost": "The session to the MCP server broke during the call (retried when safe).",
    "mcp_http_error": "The MCP server answered an HTTP error status.",
    "mcp_protocol_error": "The MCP server broke the protocol (a JSON-RPC error or an unusable message).",
    "mcp_unauthorized": "The MCP server refused the credentials twice (HTTP 401, once more after a refresh).",
    "unknown_server": "A tool names an MCP server the bound plugin does not have.",
    "mcp_auth_failed": "Credentials for the MCP server could not be obtained; no request was sent.",
    "authorization_required": "The end user has not authorized this per-user OAuth server yet; the "
    "message carries the link (`/oauth/connect/{id}`) and the next turn resumes the call.",
    "user_identity_required": "The server acts as the end user (`grant: authorization_code`) and the "
    "request named none: send `X-On-Behalf-Of`.",
    "oauth_flow_failed": "Authorizing as the end user failed (metadata, issuer, resource or token "
    "checks); the message says which.",
    "oauth_unavailable": "Per-user OAuth is not configured where this call ran.",
    "input_not_yours": "A tool's open question can only be answered by the end user it was asked of "
    "(the conversation's `X-On-Behalf-Of`); it stays open.",
    "blocked_by_guard": "A guarded run's tool result was withheld by a detector whose action is "
    "`block` (prompt injection, a credential, personal data, the classifier's verdict, or a "
    "classifier that could not answer); the model reads this error instead, naming the detectors "
    "(`guards:`, docs/security.md).",
    "run_budget_exhausted": "The run tree's budget (`max_run_tokens`, `max_run_cost_usd`, "
    "`max_run_tool_calls`) is spent: the tool call or subagent was not started, and the run's next "
    "round has no tools (docs/limits.md).",
    "operation_not_found": "An MCP endpoint was asked to decide an operation that is not one of its "
    "agent's in this organisation; or a chat reply's `hatchway-operation-id` names none of the agent's.",
    "input_relayed": "Internal to an MCP endpoint: the upstream's request for input, handed to the "
    "endpoint's 2026-07-28 client as an `input_required` result (never seen as an error).",
    "input_requested": "The tool asked the end user a question (MCP input request); the run paused "
    "with it, and the user's next message answers it.",
    "input_expired": "The tool's question expired before the end user answered it.",
    "mcp_sampling_failed": "The run's model failed to answer an MCP server's sampling request.",
    "mcp_input_unsupported": "The tool asked for a kind of input this client does not provide (MRTR).",
    "mcp_input_sensitive": "The tool asked the end user for a password, key, token or payment details by "
    "form elicitation, which MCP forbids: not asked (the run log records it).",
    "mcp_input_rounds_exceeded": "The tool kept asking for input past the round limit.",
    "mcp_task_failed": "The server ran the call as an MCP task, and the task failed (a JSON-RPC error).",
    "mcp_task_cancelled": "The server cancelled the MCP task the call ran as.",
    "mcp_task_unknown": "The MCP task a question belonged to is no longer known (ended or expired).",
    "mcp_auth": "Credentials for the MCP server could not be built (e.g. a bad header value).",
    "oauth_bad_token_url": "The OAuth `token_url` is not allowed (https, or http to a loopback host only).",
    "oauth_unreachable": "The OAuth token endpoint could not be reached.",
    "oauth_timeout": "The OAuth token endpoint did not answer in time (the server's `timeout_ms`, at "
    "most 10 s).",
    "oauth_redirect": "The OAuth token endpoint redirected; redirects are never followed.",
    "oauth_too_large": "The OAuth token endpoint's answer is over 64 KiB.",
    "oauth_failed": "The OAuth token endpoint answered a non-2xx status.",
    "oauth_bad_response": "The OAuth token endpoint's answer has no usable bearer `access_token` (or, from "
    "an enterprise IdP's token exchange, not the ID-JAG asked for).",
    "oauth_assertion_unreadable": "An `assertion_ref` or `subject_token_ref` given as `env:` or `file:` "
    "could not be read: the variable is unset or empty, the file is missing, unreadable, empty or "
    "over 64 KiB.",
    "oauth_bad_private_key": "The `private_key_jwt` key is not EC P-256 or RSA ≥ 2048 bits.",
    # -- spawn_subagent results and failed responses ---------------------------------------------
    "child_request_failed": "The child response failed (after 3 tries for transient upstream failures, "
    "as long as it had run no tool: a child that ran a tool is never run again).",
    "max_children_reached": "The run tree reached `subagents.max_children_per_run`; this child was not "
    "created.",
    "server_error": "The response failed: its run raised an error, or the replica running it stopped "
    "(`type: interrupted`).",
}

_FRAMEWORK_ROWS = (
    (404, "404", "not_found_error", "—", "Starlette", "No such route."),
    (405, "405", "invalid_request_error", "—", "Starlette", "The route exists, not with this method."),
    (
        499,
        "4xx",
        "as sent",
        "`upstream_<status>`",
        "ProviderStatusError",
        "The upstream's own 4xx, passed through with its body (`type` `rate_limit_error` for 429).",
    ),
    (
        500,
        "500",
        "server_error",
        "—",
        "(unhandled)",
        "A bug: logged with its traceback, answered without details.",
    ),
    (
        502,
        "502",
        "upstream_error",
        "`upstream_<status>`",
        "ProviderStatusError",
        "The upstream answered a 5xx.",
    ),
)
"""HTTP errors that carry no code of ours: the framework's, and the upstream's status passed through."""


def render() -> str:
    """The whole of docs/errors.md."""
    uses = scan()
    http, tool, tool_codes = _class_rows(uses)
    lines = [
        "# Error catalogue",
        "",
        "<!-- Generated by `python -m hatchway.docs` from src/hatchway/errors.py and every code the source "
        "passes; meanings live in src/hatchway/docs/error_catalogue.py. Do not edit by hand. -->",
        "",
        'Every HTTP error has OpenAI\'s shape, `{"error": {"message", "type", "param", "code"}}`; '
        "`param` names the field path or header when one is at fault. The same `code` appears in a "
        "streamed `error` event and in a WebSocket `error` message.",
        "",
        "## HTTP errors",
        "",
        "| Status | `type` | `code` | Raised as | Meaning |",
        "| --- | --- | --- | --- | --- |",
        *http,
        "",
        "## Errors a tool call returns to the model",
        "",
        'A failing tool never fails the request: the model reads `{"error": {"code", "message"}}` as '
        "that call's output and the loop goes on. The run log's step has `outcome` and `error_code`; on "
        "the Responses API the call's `mcp_call` item carries the same output.",
        "",
        "| `code` | Raised as | Meaning |",
        "| --- | --- | --- |",
        *tool,
        *_plain_rows(uses, "tool_result", exclude=tool_codes),
        "",
        "## `spawn_subagent` results",
        "",
        'A child that could not run answers its call with `{"ok": false, "error_code", "message"}` '
        "(the same from the client-side `hatchway.delegation` helper).",
        "",
        "| `error_code` | Meaning |",
        "| --- | --- |",
        *_plain_rows(uses, "subagent", columns=2),
        "",
        "## A failed response's `error`",
        "",
        "A response that fails after it was created (background, streamed, or a subagent child) is stored "
        'with `status: failed` and `error: {"code", "message", "type", "param", "hatchway_code"}` in '
        "OpenAI's shape: `code` is one of OpenAI's response error codes (the upstream's own when it "
        "reported one of them), `type` the error's type (the upstream's for a 4xx), and `hatchway_code` "
        "the HTTP error's `code` above (or `interrupted`, `unavailable`).",
        "",
        "| `code` | Meaning |",
        "| --- | --- |",
        *_plain_rows(uses, "response", columns=2),
        "",
    ]
    return "\n".join(lines)


def summary_pairs() -> set[tuple[str, str]]:
    """(status, type) of every HTTP error class that carries a code: the README's summary table lists each."""
    classes = error_classes()
    pairs = set()
    for use in scan():
        cls = classes.get(use.raiser)
        if use.kind == "class" and cls is not None and not issubclass(cls, ToolError):
            pairs.add((str(cls.status_code), cls.error_type))
    return pairs


def _class_rows(uses: list[CodeUse]) -> tuple[list[str], list[str], set[str]]:
    """Rows of codes bound to error classes: HTTP ones (with the framework's, by status), and ToolError
    ones (which reach the model, not the client); the classes raising one code share its row."""
    classes = error_classes()
    raisers: dict[str, set[str]] = defaultdict(set)
    for use in uses:
        if use.kind == "class":
            raisers[use.code].add(use.raiser)
    http = [
        (n, code, f"| {status} | `{t}` | {code} | `{r}` | {m} |")
        for n, status, t, code, r, m in _FRAMEWORK_ROWS
    ]
    tool, tool_codes = [], set()
    for code, names in sorted(raisers.items()):
        by_kind: dict[tuple[int, str] | None, list[str]] = defaultdict(list)
        for name in sorted(names):
            cls = classes[name]
            by_kind[None if issubclass(cls, ToolError) else (cls.status_code, cls.error_type)].append(
                f"`{name}`"
            )
        for kind, shown in by_kind.items():
            if kind is None:
                tool.append(f"| `{code}` | {', '.join(shown)} | {meaning(code)} |")
                tool_codes.add(code)
            else:
                status, error_type = kind
                row = f"| {status} | `{error_type}` | `{code}` | {', '.join(shown)} | {meaning(code)} |"
                http.append((status, code, row))
    return [row for _, _, row in sorted(http)], tool, tool_codes


def _plain_rows(
    uses: list[CodeUse], kind: str, *, columns: int = 3, exclude: set[str] | None = None
) -> list[str]:
    codes = sorted({u.code for u in uses if u.kind == kind} - (exclude or set()))
    if columns == 2:
        return [f"| `{code}` | {meaning(code)} |" for code in codes]
    return [f"| `{code}` | — | {meaning(code)} |" for code in codes]


def meaning(code: str) -> str:
    """The documented meaning of ``code`` (KeyError for an undocumented one: the test names it)."""
    return MEANINGS[code]
