"""The served ``/openapi.json`` describes what the gateway does: every route (the chat route served
ahead of the router included), the request body of each route that reads one, and the errors it
answers in OpenAI's shape — never FastAPI's 422, which the gateway does not send. Real answers are
checked against it."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from fastapi.routing import APIRoute

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

BODIES = {
    ("post", "/v1/chat/completions"),
    ("post", "/v1/responses"),
    ("post", "/v1/responses/compact"),
    ("put", "/v1/secrets/{name}"),
    ("post", "/v1/operations/{operation_id}/confirm"),
    ("post", "/v1/tools/drift/{server}/approve"),
    ("post", "/v1/approvals/{operation_id}/approve"),
    ("post", "/v1/approvals/{operation_id}/reject"),
}


@pytest.fixture
def document(gateway: RunningGateway) -> dict[str, Any]:
    answer = httpx.get(f"{gateway.url}/openapi.json")
    assert answer.status_code == 200
    return answer.json()


def api_routes(routes: list[Any]) -> list[APIRoute]:
    """The app's API routes, inside the routers it includes (FastAPI wraps each included router)."""
    found = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif (inner := getattr(route, "original_router", None)) is not None:
            found.extend(api_routes(inner.routes))
    return found


def resolved(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with ``$ref``s resolvable against the document's components (for jsonschema)."""
    return {**schema, "components": document["components"]}


def test_every_route_is_documented_with_its_body_and_errors(
    gateway: RunningGateway, document: dict[str, Any]
) -> None:
    app = gateway.server.server.config.app
    served = {
        (method.lower(), route.path)
        for route in api_routes(app.routes)
        if route.include_in_schema
        for method in route.methods
    } | {("post", "/v1/chat/completions")}
    documented = {(method, path) for path, ops in document["paths"].items() for method in ops}
    assert served == documented

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            if path.startswith("/v1/"):
                assert {"400", "401", "404", "413", "500", "503"} <= set(responses), (method, path)
            has_body = "requestBody" in operation
            assert has_body == ((method, path) in BODIES), (method, path)
            if has_body:
                ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert ref.rpartition("/")[2] in document["components"]["schemas"], ref


def test_real_answers_match_the_document(gateway: RunningGateway, document: dict[str, Any]) -> None:
    auth = {"authorization": f"Bearer {gateway.key}"}
    error = resolved(document, {"$ref": "#/components/schemas/Error"})
    answers = [
        httpx.post(f"{gateway.url}/v1/responses", json={"model": 5}, headers=auth),
        httpx.post(f"{gateway.url}/v1/chat/completions", json={"messages": "no"}, headers=auth),
        httpx.get(f"{gateway.url}/v1/responses/resp_unknown", headers=auth),
        httpx.get(f"{gateway.url}/v1/models"),
    ]
    assert [a.status_code for a in answers] == [400, 400, 404, 401]
    for answer in answers:
        jsonschema.validate(answer.json(), error)

    body = {"model": "gpt-4o", "input": "hi", "metadata": {"k": "v"}}
    request_schema = resolved(document, {"$ref": "#/components/schemas/CreateResponseRequest"})
    jsonschema.validate(body, request_schema)  # what the gateway accepts, the document accepts
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": 5}, request_schema)  # and what it refuses, it refuses


def success_schema(document: dict[str, Any], method: str, path: str, status: str = "200") -> dict[str, Any]:
    content = document["paths"][path][method]["responses"][status]["content"]
    return resolved(document, content["application/json"]["schema"])


def test_successful_answers_match_the_documented_objects(
    gateway: RunningGateway, llm: ScriptedLLM, document: dict[str, Any]
) -> None:
    """Each route's success, checked against the document: the OpenAI-compatible ones against the
    official SDK's own models of those objects (what an OpenAI client parses)."""
    llm.handler = lambda _: Reply(text="ok")
    auth = {"authorization": f"Bearer {gateway.key}"}
    url = gateway.url

    def check(method: str, path: str, answer: httpx.Response, status: int = 200) -> dict[str, Any]:
        assert answer.status_code == status, answer.text
        schema = success_schema(document, method, path, str(status))
        jsonschema.Draft202012Validator(schema).validate(answer.json())
        return answer.json()

    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    check("post", "/v1/chat/completions", httpx.post(f"{url}/v1/chat/completions", json=chat, headers=auth))
    create = httpx.post(f"{url}/v1/responses", json={"model": "gpt-4o", "input": "hi"}, headers=auth)
    created = check("post", "/v1/responses", create)
    assert created["object"] == "response" and created["output"]
    one = "/v1/responses/{response_id}"
    check("get", one, httpx.get(f"{url}/v1/responses/{created['id']}", headers=auth))
    items = httpx.get(f"{url}/v1/responses/{created['id']}/input_items", headers=auth)
    assert check("get", one + "/input_items", items)["data"]
    compact = {"model": "gpt-4o", "previous_response_id": created["id"]}
    compacted = httpx.post(f"{url}/v1/responses/compact", json=compact, headers=auth)
    check("post", "/v1/responses/compact", compacted)
    check("get", "/v1/responses", httpx.get(f"{url}/v1/responses", headers=auth))
    check("delete", one, httpx.delete(f"{url}/v1/responses/{created['id']}", headers=auth))
    assert check("get", "/v1/models", httpx.get(f"{url}/v1/models", headers=auth))["data"]
    logs = check("get", "/v1/logs", httpx.get(f"{url}/v1/logs", headers=auth))
    check("get", "/v1/logs/{log_id}", httpx.get(f"{url}/v1/logs/{logs['data'][0]['id']}", headers=auth))
    spend = check("get", "/v1/usage", httpx.get(f"{url}/v1/usage", params={"group_by": "key"}, headers=auth))
    assert spend["totals"]["requests"] == len(logs["data"]) and spend["data"][0]["key_name"] == "default"
    check("get", "/v1/operations", httpx.get(f"{url}/v1/operations", headers=auth))
    secret = "/v1/secrets/{name}"
    check("put", secret, httpx.put(f"{url}/v1/secrets/s1", json={"value": "v"}, headers=auth), 201)
    check("put", secret, httpx.put(f"{url}/v1/secrets/s1", json={"value": "w"}, headers=auth))
    check("get", "/v1/secrets", httpx.get(f"{url}/v1/secrets", headers=auth))
    check("delete", secret, httpx.delete(f"{url}/v1/secrets/s1", headers=auth))
    check("get", "/v1/mcp/endpoints", httpx.get(f"{url}/v1/mcp/endpoints", headers=auth))


def test_a_405_names_the_methods_of_the_resource(gateway: RunningGateway) -> None:
    """Starlette names only the first route's methods; FastAPI declares one route per method."""
    allow = {
        path: httpx.request("PATCH", f"{gateway.url}{path}").headers.get("allow")
        for path in ("/v1/responses", "/v1/responses/resp_1", "/v1/responses/compact", "/v1/secrets/a")
    }
    assert allow == {
        "/v1/responses": "GET, POST",
        "/v1/responses/resp_1": "DELETE, GET",
        "/v1/responses/compact": "POST",
        "/v1/secrets/a": "DELETE, PUT",
    }
