"""The served OpenAPI document (``/openapi.json``): every route with its request body and the errors
it can answer, generated from the same models the routes validate with.

FastAPI documents what it sees: the routes that read their JSON themselves (to answer a 400 with the
field path, not FastAPI's 422) would show no body, every route would claim a 422 it never sends, and
the chat route, served ahead of the router, would be missing. This fills those in once, when the
document is first asked for.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from hatchway.api.approvals import Decision
from hatchway.api.chat import ChatCompletionsApp, ChatRequest
from hatchway.api.responses_compact import CompactRequest
from hatchway.api.secrets import SecretBody
from hatchway.responses.wire import CreateResponseRequest

ERROR = "#/components/schemas/Error"
ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
"""OpenAI's error shape, which every error the gateway answers has (docs/errors.md lists the codes)."""

ERRORS = {
    "400": "Malformed input; `param` names the field path.",
    "401": "Missing, unknown or revoked API key.",
    "403": "Not allowed (an egress or secret rule, another end user's operation).",
    "404": "No such object in this organisation.",
    "409": "The object's state does not allow this.",
    "413": "The request body is larger than `max_request_body_bytes`.",
    "431": "The request line and headers are larger than `max_request_header_bytes`.",
    "500": "A bug in the gateway (the message says only that).",
    "502": "The upstream failed or answered something that is not a completion.",
    "503": "A component the request needs cannot be reached (the database, the job queue).",
    "504": "The upstream did not answer in time.",
}
"""What any ``/v1`` route may answer besides its success (the refusals of the HTTP protocol included)."""

BODIES: dict[tuple[str, str], tuple[type[BaseModel], bool]] = {
    ("post", "/v1/responses"): (CreateResponseRequest, True),
    ("post", "/v1/responses/compact"): (CompactRequest, True),
    ("put", "/v1/secrets/{name}"): (SecretBody, True),
    ("post", "/v1/approvals/{operation_id}/approve"): (Decision, False),
    ("post", "/v1/approvals/{operation_id}/reject"): (Decision, False),
}
"""Routes that read their JSON body themselves: its model, and whether it is required."""

CONFIRM = "#/components/schemas/ConfirmBody"
CONFIRM_BODY: dict[str, Any] = {
    "title": "ConfirmBody",
    "type": "object",
    "additionalProperties": False,
    "properties": {"confirm": {"const": True}, "arguments_digest": {"type": "string"}},
}
"""``POST /v1/operations/{id}/confirm``'s optional body (``api/operations.py`` ``_confirm_body``)."""


LIST_SCHEMA: dict[str, Any] = {
    "title": "List",
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object"}},
        "has_more": {"type": "boolean"},
        "last_id": {"type": ["string", "null"]},
    },
}
"""The page every listing of the gateway's own objects answers (logs, operations, secrets, MCP)."""

DELETED_SCHEMA: dict[str, Any] = {
    "title": "ResponseDeleted",
    "type": "object",
    "required": ["id", "object", "deleted"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "response.deleted"},
        "deleted": {"const": True},
    },
}

_USAGE_SUMS: dict[str, Any] = {
    "requests": {"type": "integer"},
    "prompt_tokens": {"type": "integer"},
    "completion_tokens": {"type": "integer"},
    "total_tokens": {"type": "integer"},
    "cost_usd": {"type": "number"},
    "unpriced_requests": {"type": "integer"},
}
USAGE_SCHEMA: dict[str, Any] = {
    "title": "UsageList",
    "type": "object",
    "required": ["object", "group_by", "data", "totals", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "group_by": {"enum": ["key", "user", "agent", "model"]},
        "since": {"type": ["integer", "null"]},
        "until": {"type": ["integer", "null"]},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["object", *_USAGE_SUMS],
                "properties": {"object": {"const": "usage.group"}, **_USAGE_SUMS},
            },
        },
        "totals": {"type": "object", "required": list(_USAGE_SUMS), "properties": _USAGE_SUMS},
        "has_more": {"type": "boolean"},
    },
}
"""``GET /v1/usage`` (``api/usage.py``): each group is named by its ``group_by`` key (``model``…)."""

OBJECT_SCHEMA: dict[str, Any] = {"title": "Object", "type": "object"}
"""One of the gateway's own objects (a log, an operation, a secret's metadata)."""

SSE = {"text/event-stream": {"schema": {"type": "string"}}}


def _success_schemas() -> dict[tuple[str, str], tuple[str, type[BaseModel] | dict[str, Any], bool]]:
    """What each route answers on success: (status, schema, whether it may stream instead).

    The OpenAI-compatible routes are described by the official SDK's own models of those objects
    (imported here, when the document is first built, not at start-up), so the fuzz job checks the
    gateway's answers against what an OpenAI client expects to parse.
    """
    from openai.types import Model
    from openai.types.chat import ChatCompletion
    from openai.types.responses import CompactedResponse, Response, ResponseItemList

    models = {**LIST_SCHEMA, "title": "ModelList"}
    models["properties"] = {
        **LIST_SCHEMA["properties"],
        "data": {"type": "array", "items": Model.model_json_schema()},  # a model with no $defs
    }
    listing: dict[str, Any] = LIST_SCHEMA
    return {
        ("post", "/v1/chat/completions"): ("200", ChatCompletion, True),
        ("post", "/v1/responses"): ("200", Response, True),
        ("get", "/v1/responses/{response_id}"): ("200", Response, True),
        ("post", "/v1/responses/{response_id}/cancel"): ("200", Response, False),
        ("delete", "/v1/responses/{response_id}"): ("200", DELETED_SCHEMA, False),
        ("get", "/v1/responses/{response_id}/input_items"): ("200", ResponseItemList, False),
        ("post", "/v1/responses/compact"): ("200", CompactedResponse, False),
        ("get", "/v1/responses"): ("200", listing, False),
        ("get", "/v1/models"): ("200", models, False),
        ("get", "/v1/logs"): ("200", listing, False),
        ("get", "/v1/logs/{log_id}"): ("200", OBJECT_SCHEMA, False),
        ("get", "/v1/usage"): ("200", USAGE_SCHEMA, False),
        ("get", "/v1/operations"): ("200", listing, False),
        ("get", "/v1/operations/{operation_id}"): ("200", OBJECT_SCHEMA, False),
        ("post", "/v1/operations/{operation_id}/confirm"): ("200", OBJECT_SCHEMA, False),
        ("post", "/v1/operations/{operation_id}/cancel"): ("200", OBJECT_SCHEMA, False),
        ("get", "/v1/approvals"): ("200", listing, False),
        ("get", "/v1/approvals/{operation_id}"): ("200", OBJECT_SCHEMA, False),
        ("post", "/v1/approvals/{operation_id}/approve"): ("200", OBJECT_SCHEMA, False),
        ("post", "/v1/approvals/{operation_id}/reject"): ("200", OBJECT_SCHEMA, False),
        ("get", "/v1/secrets"): ("200", listing, False),
        ("put", "/v1/secrets/{name}"): ("200", OBJECT_SCHEMA, False),
        ("delete", "/v1/secrets/{name}"): ("200", OBJECT_SCHEMA, False),
        ("get", "/v1/mcp/servers"): ("200", listing, False),
        ("get", "/v1/mcp/endpoints"): ("200", listing, False),
    }


def install_openapi(app: FastAPI) -> None:
    """Serve the completed document at ``app.openapi_url``."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def build_openapi(app: FastAPI) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    components[CONFIRM.rpartition("/")[2]] = CONFIRM_BODY
    for (method, path), (model, required) in BODIES.items():
        schema["paths"][path][method]["requestBody"] = _body(components, model, required)
    confirm = schema["paths"]["/v1/operations/{operation_id}/confirm"]["post"]
    confirm["requestBody"] = {
        "required": False,
        "content": _json({"$ref": "#/components/schemas/ConfirmBody"}),
    }
    schema["paths"][ChatCompletionsApp.path] = {"post": _chat_operation(components)}
    for (method, path), (status, success, streams) in _success_schemas().items():
        _document_success(components, schema["paths"][path][method], status, success, streams)
    _compacted_output_holds_user_messages(components)
    secret = schema["paths"]["/v1/secrets/{name}"]
    secret["put"]["responses"]["201"] = {**secret["put"]["responses"]["200"], "description": "Created"}
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            _document_errors(path, operation)
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    return schema


def _document_success(
    components: dict[str, Any],
    operation: dict[str, Any],
    status: str,
    success: type[BaseModel] | dict[str, Any],
    streams: bool,
) -> None:
    if isinstance(success, dict):
        name = success["title"]
        components[name] = success
    else:
        name = success.__name__
        model_schema = success.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[name] = model_schema
    content = _json({"$ref": f"#/components/schemas/{name}"})
    if streams:
        content.update(SSE)
    responses = operation.setdefault("responses", {})
    description = responses.get(status, {}).get("description", "OK")
    responses[status] = {"description": description, "content": content}


def _compacted_output_holds_user_messages(components: dict[str, Any]) -> None:
    """A compaction's output is the user's messages, then the compaction item (OpenAI's own
    description of ``/v1/responses/compact``); the SDK's model lists output items only."""
    from openai.types.responses import ResponseInputMessageItem

    message = ResponseInputMessageItem.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(message.pop("$defs", {}))
    components[ResponseInputMessageItem.__name__] = message
    output = components["CompactedResponse"]["properties"]["output"]
    user_message = {"$ref": f"#/components/schemas/{ResponseInputMessageItem.__name__}"}
    output["items"] = {"anyOf": [output["items"], user_message]}


def _document_errors(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)  # FastAPI's own; the gateway answers 400 with the field path
    errors = ERRORS if path.startswith("/v1/") else {"503": "Not ready (a check failed)."}
    for status, description in errors.items():
        responses.setdefault(status, {"description": description, "content": _json({"$ref": ERROR})})


def _chat_operation(components: dict[str, Any]) -> dict[str, Any]:
    return {
        "summary": "Create a chat completion (the agent loop runs server-side over the plugin's tools)",
        "operationId": "create_chat_completion",
        "requestBody": _body(components, ChatRequest, True),
        "responses": {
            "200": {"description": "A `chat.completion`, or with `stream: true` an event stream of chunks."}
        },
    }


def _body(components: dict[str, Any], model: type[BaseModel], required: bool) -> dict[str, Any]:
    model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(model_schema.pop("$defs", {}))
    components[model.__name__] = model_schema
    return {"required": required, "content": _json({"$ref": f"#/components/schemas/{model.__name__}"})}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}
