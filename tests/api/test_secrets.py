"""``/v1/secrets`` over real HTTP: values go in and never come out; the key decides the organisation."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner


class SecretsClient:
    """Calls the routes as one organisation and hands every body to the leak scanner."""

    def __init__(self, gateway: RunningGateway, key: str, scanner: SecretScanner) -> None:
        self.http = httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {key}"}, timeout=10)
        self.scanner = scanner

    def __enter__(self) -> SecretsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _seen(self, response: httpx.Response) -> httpx.Response:
        self.scanner.observe(f"{response.request.method} {response.request.url.path}", response.text)
        return response

    def put(self, name: str, body: object) -> httpx.Response:
        return self._seen(self.http.put(f"/v1/secrets/{name}", json=body))

    def put_raw(self, name: str, content: bytes) -> httpx.Response:
        return self._seen(self.http.put(f"/v1/secrets/{name}", content=content))

    def list(self) -> list[dict]:
        response = self._seen(self.http.get("/v1/secrets"))
        assert response.status_code == 200, response.text
        return response.json()["data"]

    def delete(self, name: str) -> httpx.Response:
        return self._seen(self.http.delete(f"/v1/secrets/{name}"))


def test_put_list_delete_and_no_value_ever_comes_back(
    secret_scanner: SecretScanner, gateway_factory, database_url: str
) -> None:
    gateway = gateway_factory(database_url=database_url)
    secret_scanner.watch_database(database_url)
    value, replaced = f"sk-{uuid.uuid4().hex}", f"sk-{uuid.uuid4().hex}"
    secret_scanner.watch(value, replaced)
    with SecretsClient(gateway, gateway.key, secret_scanner) as api:
        _put_list_delete(api, value, replaced)


def _put_list_delete(api: SecretsClient, value: str, replaced: str) -> None:
    created = api.put("mcp_search_api_key", {"value": value, "allowed_hosts": ["MCP.example.com"]})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "mcp_search_api_key"
    assert created.json()["allowed_hosts"] == ["mcp.example.com"] and "value" not in created.json()
    updated = api.put("mcp_search_api_key", {"value": replaced})
    assert updated.status_code == 200 and updated.json()["allowed_hosts"] == []

    [listed] = api.list()
    assert set(listed) == {"object", "name", "allowed_hosts", "created_at", "updated_at"}
    assert listed["updated_at"] >= listed["created_at"]

    assert api.delete("mcp_search_api_key").json() == {
        "object": "secret.deleted",
        "name": "mcp_search_api_key",
        "deleted": True,
    }
    assert api.list() == []
    missing = api.delete("mcp_search_api_key")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "secret_not_found"


def test_organisation_b_cannot_see_or_delete_organisation_a_secret(
    secret_scanner: SecretScanner, gateway_factory
) -> None:
    gateway = gateway_factory()
    other = gateway.new_org()
    secret_scanner.watch("value-of-a")
    with (
        SecretsClient(gateway, gateway.key, secret_scanner) as mine,
        SecretsClient(gateway, other.key, secret_scanner) as theirs,
    ):
        assert mine.put("shared_name", {"value": "value-of-a"}).status_code == 201
        assert theirs.list() == []
        assert theirs.delete("shared_name").status_code == 404
        assert [s["name"] for s in mine.list()] == ["shared_name"]


@pytest.mark.parametrize(
    ("name", "body", "param", "message"),
    [
        ("a.b", {"value": "v"}, "name", "found '.'"),
        ("x" * 65, {"value": "v"}, "name", "at most 64 characters"),
        ("ok", {"value": ""}, "value", "must be a non-empty string"),
        ("ok", {"value": 12345678}, "value", "must be a non-empty string"),
        ("ok", {}, "value", "required"),
        ("ok", {"value": "v", "colour": "red"}, "colour", "unknown key"),
        ("ok", {"value": "v", "allowed_hosts": "mcp.example.com"}, "allowed_hosts", "list"),
        (
            "ok",
            {"value": "v", "allowed_hosts": ["a.example.com", "http://b/"]},
            "allowed_hosts[1]",
            "without a path",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    secret_scanner: SecretScanner, gateway: RunningGateway, name: str, body: dict, param: str, message: str
) -> None:
    with SecretsClient(gateway, gateway.key, secret_scanner) as api:
        response = api.put(name, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and message in error["message"]


def test_an_oversized_or_numeric_value_is_refused_without_being_echoed(
    secret_scanner: SecretScanner, gateway: RunningGateway
) -> None:
    big = "B" * 20 + uuid.uuid4().hex + "B" * (64 * 1024)
    secret_scanner.watch(big[:52], "12345678")
    with SecretsClient(gateway, gateway.key, secret_scanner) as api:
        assert api.put("big", {"value": big}).status_code == 400
        assert api.put("num", {"value": 12345678}).status_code == 400
        assert api.put_raw("raw", b'{"value": "unterminated').status_code == 400


def test_the_routes_need_a_key(gateway: RunningGateway) -> None:
    assert httpx.get(f"{gateway.url}/v1/secrets").status_code == 401
    assert httpx.put(f"{gateway.url}/v1/secrets/x", json={"value": "v"}).status_code == 401
