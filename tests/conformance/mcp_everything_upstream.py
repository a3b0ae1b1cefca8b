"""The upstream MCP server of the server-conformance run: every fixture the suite's server scenarios use.

``@modelcontextprotocol/conformance`` tests an MCP *server* by calling fixtures with fixed names
(``test_simple_text``, ``test://static-text``, ``test_prompt_with_arguments``…). Hatchway's MCP
endpoint fronts an upstream server, so its conformance run needs one that has them all; this is it,
written with the official SDK (``MCPServer``) and served the way the SDK serves: streamable HTTP at
``/mcp``, both the 2026-07-28 stateless wire and 2025-11-25 sessions. Passed to the suite directly
(``conformance server --url http://127.0.0.1:PORT/mcp``) it sets the baseline the gateway is
measured against.

    python tests/conformance/mcp_everything_upstream.py --port 3001 [--host 127.0.0.1]

``build_app()`` gives the same server as an ASGI app, for running it in-process
(``tests.support.servers.ServerThread(build_app())``).

What the scenarios need beyond plain fixtures, and where it comes from:

* ``requestState`` is sealed by the SDK's request-state boundary (``RequestStateSecurity``), so a
  tampered echo is refused before any tool runs (input-required-result-tampered-state).
* Caching hints (``ttlMs``/``cacheScope``) are put on every cacheable result by the SDK, from the
  server's ``cache_hints``.
* DNS-rebinding protection is the SDK transport's: only ``localhost``/``127.0.0.1`` Host and
  Origin values are served, whatever address the server listens on.
* A resource that does not exist is the SDK's ``-32602`` error with the URI in ``data``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import uvicorn
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Prompt, UserMessage
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestedSchema,
    ElicitRequestFormParams,
    ElicitResult,
    EmbeddedResource,
    ImageContent,
    InputRequest,
    InputRequiredResult,
    InputResponses,
    ListRootsRequest,
    ListRootsResult,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)
from starlette.applications import Starlette

SERVER_NAME = "hatchway-conformance-upstream"

# A 1x1 red PNG and a WAV header with two bytes of silence: the smallest valid media of each kind.
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

# requestState is sealed under this key (the boundary needs 32 bytes or more). A fixed key, not a
# per-process one, so restarting the upstream between two rounds of a flow does not break it.
REQUEST_STATE_KEY = b"hatchway-conformance-upstream-request-state-key"

# Host/Origin values the transport serves; any other (a DNS-rebinding page's) is refused with 4xx.
LOOPBACK_SECURITY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*"],
    allowed_origins=["http://127.0.0.1", "http://127.0.0.1:*", "http://localhost", "http://localhost:*"],
)

# SEP-2549 freshness hints. The SDK puts ttlMs 0 / private on every cacheable result by itself;
# the fixtures never change, so they say so (server/discover keeps the SDK's default).
CACHEABLE_FIXTURES: tuple[CacheableMethod, ...] = (
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
)
CACHE_HINTS = {method: CacheHint(ttl_ms=60_000, scope="public") for method in CACHEABLE_FIXTURES}

COMPLETIONS = ["paris", "park", "party", "test", "testValue1"]


def _schema(**properties: str) -> ElicitRequestedSchema:
    """A flat elicitation schema: every property required, of the JSON type given."""
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


def _ask(message: str, **properties: str) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(message=message, requested_schema=_schema(**properties))
    )


def _sample(text: str, max_tokens: int) -> CreateMessageRequest:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    return CreateMessageRequest(params=CreateMessageRequestParams(messages=[message], max_tokens=max_tokens))


def _answer(responses: InputResponses | None, key: str, field: str) -> str | None:
    """``content[field]`` of an accepted elicitation answer under ``key``, if there is one."""
    answer = (responses or {}).get(key)
    if isinstance(answer, ElicitResult) and answer.action == "accept" and answer.content:
        value = answer.content.get(field)
        return None if value is None else str(value)
    return None


def _sampled_text(responses: InputResponses | None, key: str) -> str | None:
    answer = (responses or {}).get(key)
    if isinstance(answer, CreateMessageResult) and isinstance(answer.content, TextContent):
        return answer.content.text
    return None


def _add_content_tools(mcp: MCPServer) -> None:
    """tools-call-*: one tool per content type, plus the error and progress ones."""

    @mcp.tool(description="Answers with one text block.")
    def test_simple_text() -> str:
        return "This is a simple text response for testing."

    @mcp.tool(description="Answers with a PNG image.")
    def test_image_content() -> list[ImageContent]:
        return [ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")]

    @mcp.tool(description="Answers with a WAV clip.")
    def test_audio_content() -> list[AudioContent]:
        return [AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")]

    @mcp.tool(description="Answers with an embedded text resource.")
    def test_embedded_resource() -> list[EmbeddedResource]:
        resource = TextResourceContents(
            uri="test://embedded-resource",
            mime_type="text/plain",
            text="This is an embedded resource content.",
        )
        return [EmbeddedResource(type="resource", resource=resource)]

    @mcp.tool(description="Answers with text, an image and an embedded resource.")
    def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
        resource = TextResourceContents(
            uri="test://mixed-content-resource",
            mime_type="application/json",
            text=json.dumps({"test": "data", "value": 123}),
        )
        return [
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
            EmbeddedResource(type="resource", resource=resource),
        ]

    @mcp.tool(description="Always fails: a tool error (isError: true), not a protocol error.")
    def test_error_handling() -> str:
        raise ToolError("This tool intentionally returns an error for testing")

    @mcp.tool(description="Reports progress 0, 50 and 100 of 100, about 50 ms apart.")
    async def test_tool_with_progress(ctx: Context) -> str:
        for step in (0, 50, 100):
            if step:
                await asyncio.sleep(0.05)
            await ctx.report_progress(progress=step, total=100, message=f"step {step} of 100")
        return "Progress reported: 0, 50, 100 of 100."


def _add_stateless_probes(mcp: MCPServer) -> None:
    """server-stateless (SEP-2575): the diagnostic tools its checks call."""

    @mcp.tool(description="Needs the client's sampling capability; refuses with -32021 without it.")
    def test_missing_capability(ctx: Context) -> str:
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.sampling is None:
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="This tool requires the client's 'sampling' capability",
                data={"requiredCapabilities": {"sampling": {}}},
            )
        return "The client declared sampling."

    @mcp.tool(description="Asks the user a question as an input-required result, never a request.")
    def test_streaming_elicitation(ctx: Context) -> str | InputRequiredResult:
        name = _answer(ctx.input_responses, "user_name", "name")
        if name is not None:
            return f"Hello, {name}!"
        return InputRequiredResult(input_requests={"user_name": _ask("What is your name?", name="string")})

    @mcp.tool(description="Logs one info message (delivered only when the request set a log level).")
    async def test_logging_tool(ctx: Context) -> str:
        with warnings.catch_warnings():  # logging is deprecated on the 2026-07-28 wire, still served
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await ctx.info("test_logging_tool ran")
        return "Logged one message."

    @mcp.tool(description="Adds and removes a tool, then announces the tool list changed.")
    async def test_trigger_tool_change(ctx: Context) -> str:
        mcp.add_tool(_transient, name="test_transient_tool", description="Exists for an instant.")
        mcp.remove_tool("test_transient_tool")
        await ctx.notify_tools_changed()
        return "Tool list changed."

    @mcp.tool(description="Adds and removes a prompt, then announces the prompt list changed.")
    async def test_trigger_prompt_change(ctx: Context) -> str:
        mcp.add_prompt(
            Prompt.from_function(_transient, name="test_transient_prompt", description="Transient.")
        )
        mcp.remove_prompt("test_transient_prompt")
        await ctx.notify_prompts_changed()
        return "Prompt list changed."


def _transient() -> str:
    return "transient"


def _add_single_input_tools(mcp: MCPServer) -> None:
    """input-required-result-* (SEP-2322): one input request each, answered by InputRequiredResult."""

    @mcp.tool(description="Asks for the user's name (key user_name), then greets them.")
    def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
        name = _answer(ctx.input_responses, "user_name", "name")
        if name is not None:
            return f"Hello, {name}!"
        # No answer, a wrong key or an unusable one: ask (again).
        return InputRequiredResult(input_requests={"user_name": _ask("What is your name?", name="string")})

    @mcp.tool(description="Asks the client's model a question (key capital_question), then reports it.")
    def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
        text = _sampled_text(ctx.input_responses, "capital_question")
        if text is not None:
            return f"The model said: {text}"
        question = _sample("What is the capital of France?", max_tokens=100)
        return InputRequiredResult(input_requests={"capital_question": question})

    @mcp.tool(description="Asks for the client's roots (key client_roots), then lists them.")
    def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
        answer = (ctx.input_responses or {}).get("client_roots")
        if isinstance(answer, ListRootsResult):
            uris = ", ".join(str(root.uri) for root in answer.roots) or "none"
            return f"The client has {len(answer.roots)} root(s): {uris}"
        return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})

    @mcp.tool(description="Asks for a confirmation with requestState, and checks the state echoed back.")
    def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
        if ctx.request_state == "awaiting-confirm" and "confirm" in (ctx.input_responses or {}):
            return "state-ok: the echoed requestState was verified."
        ask = _ask("Please confirm", ok="boolean")
        return InputRequiredResult(input_requests={"confirm": ask}, request_state="awaiting-confirm")

    @mcp.tool(description="Round-trips a sealed requestState; the SDK refuses a tampered one.")
    def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
        # Only an intact state reaches this handler: the request-state boundary rejects the rest.
        if ctx.request_state == "round-1":
            return "state-ok: the requestState was intact."
        ask = _ask("Please confirm", ok="boolean")
        return InputRequiredResult(input_requests={"confirm": ask}, request_state="round-1")


def _add_compound_input_tools(mcp: MCPServer) -> None:
    """input-required-result-* (SEP-2322): several inputs at once, several rounds, capability-gated."""

    @mcp.tool(description="Asks for an elicitation, a sampling and the roots at once.")
    def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
        requests: dict[str, InputRequest] = {
            "user_name": _ask("What is your name?", name="string"),
            "greeting": _sample("Generate a greeting", max_tokens=50),
            "client_roots": ListRootsRequest(),
        }
        if ctx.request_state == "awaiting-all" and set(requests) <= set(ctx.input_responses or {}):
            return "All three inputs received."
        return InputRequiredResult(input_requests=requests, request_state="awaiting-all")

    @mcp.tool(description="Three rounds: a name, then a colour (the state carries the name), then done.")
    def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
        state: dict[str, Any] = json.loads(ctx.request_state) if ctx.request_state else {}
        if state.get("round") == 2:
            color = _answer(ctx.input_responses, "step2", "color")
            if color is not None:
                return f"{state['name']} likes {color}."
        if state.get("round") == 1:
            name = _answer(ctx.input_responses, "step1", "name")
            if name is not None:
                ask = _ask("Step 2: What is your favorite color?", color="string")
                next_state = json.dumps({"round": 2, "name": name})
                return InputRequiredResult(input_requests={"step2": ask}, request_state=next_state)
        # A first call, or an answer missing: (re)start at step 1.
        ask = _ask("Step 1: What is your name?", name="string")
        return InputRequiredResult(input_requests={"step1": ask}, request_state=json.dumps({"round": 1}))

    @mcp.tool(description="Asks only for the kinds of input the client declared it can give.")
    def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
        declared = ctx.client_capabilities
        requests: dict[str, InputRequest] = {}
        if declared is not None and declared.sampling is not None:
            requests["greeting"] = _sample("Say hello", max_tokens=50)
        if declared is not None and declared.elicitation is not None:
            requests["user_name"] = _ask("What is your name?", name="string")
        if declared is not None and declared.roots is not None:
            requests["client_roots"] = ListRootsRequest()
        if not requests:
            return "The client declared no capability to ask it through."
        if set(requests) <= set(ctx.input_responses or {}):
            return f"Received: {', '.join(sorted(requests))}."
        return InputRequiredResult(input_requests=requests)


def _add_resources(mcp: MCPServer) -> None:
    @mcp.resource("test://static-text", name="static-text", mime_type="text/plain")
    def static_text() -> str:
        """A fixed text resource."""
        return "This is the content of the static text resource."

    @mcp.resource("test://static-binary", name="static-binary", mime_type="image/png")
    def static_binary() -> bytes:
        """A fixed binary resource (a PNG image)."""
        return base64.b64decode(PNG_BASE64)

    @mcp.resource("test://template/{id}/data", name="template-data", mime_type="application/json")
    def template_data(id: str) -> str:
        """JSON naming the id taken from the URI."""
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @mcp.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
    def watched() -> str:
        """A resource clients may watch for updates."""
        return "Watched resource content"


def _add_prompts(mcp: MCPServer) -> None:
    @mcp.prompt(description="A prompt without arguments.")
    def test_simple_prompt() -> list[UserMessage]:
        return [UserMessage(content=TextContent(type="text", text="This is a simple prompt for testing."))]

    @mcp.prompt(description="A prompt with two required arguments, arg1 and arg2.")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        text = f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
        return [UserMessage(content=TextContent(type="text", text=text))]

    @mcp.prompt(description="A prompt embedding the resource named by resourceUri.")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # camelCase: the wire name
        resource = TextResourceContents(
            uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            UserMessage(content=EmbeddedResource(type="resource", resource=resource)),
            UserMessage(content=TextContent(type="text", text="Please process the embedded resource above.")),
        ]

    @mcp.prompt(description="A prompt carrying an image.")
    def test_prompt_with_image() -> list[UserMessage]:
        return [
            UserMessage(content=ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
            UserMessage(content=TextContent(type="text", text="Please analyze the image above.")),
        ]

    @mcp.prompt(description="Asks the user for context (an input-required result) before it is built.")
    def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
        context = _answer(ctx.input_responses, "user_context", "context")
        if context is None:
            ask = _ask("What context should the prompt use?", context="string")
            return InputRequiredResult(input_requests={"user_context": ask})
        return [UserMessage(content=TextContent(type="text", text=f"Use the following context: {context}"))]

    @mcp.completion()
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        values = [value for value in COMPLETIONS if value.startswith(argument.value)]
        return Completion(values=values, total=len(values), has_more=False)


def build_server() -> MCPServer:
    """The SDK server with every fixture registered."""
    mcp = MCPServer(
        SERVER_NAME,
        version="1.0.0",
        log_level="WARNING",
        request_state_security=RequestStateSecurity(keys=[REQUEST_STATE_KEY]),
        cache_hints=CACHE_HINTS,
    )
    _add_content_tools(mcp)
    _add_stateless_probes(mcp)
    _add_single_input_tools(mcp)
    _add_compound_input_tools(mcp)
    _add_resources(mcp)
    _add_prompts(mcp)
    return mcp


def build_app(server: MCPServer | None = None) -> Starlette:
    """The streamable-HTTP ASGI app (``/mcp``) of ``server`` (default: a fresh ``build_server()``)."""
    mcp = server or build_server()
    return mcp.streamable_http_app(streamable_http_path="/mcp", transport_security=LOOPBACK_SECURITY)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    # One second of grace: an open event stream (subscriptions/listen) would hold shutdown forever.
    uvicorn.run(
        build_app(), host=options.host, port=options.port, log_level="warning", timeout_graceful_shutdown=1
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
