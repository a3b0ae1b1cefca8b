"""A NUL character (``%00``) in a path or query is the caller's mistake, answered 400 before any
route — not a 500 from PostgreSQL, which cannot compare text holding one — and the connection stays
usable for the next request."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import GatewayFactory

PATHS = [
    "/v1/logs?model=%00",
    "/v1/operations?after=op_%00",
    "/v1/operations/op_%00",
    "/v1/responses/resp_%00",
    "/v1/responses/resp_%00/input_items",
    "/v1/secrets/name%00",
]


@pytest.mark.parametrize("path", PATHS)
def test_a_nul_in_a_path_or_query_is_a_400_and_the_connection_serves_on(
    gateway_factory: GatewayFactory, database_url: str, path: str
) -> None:
    gateway = gateway_factory(database_url=database_url)
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {gateway.key}"}) as client:
        answer = client.get(path)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"
        assert "NUL" in answer.json()["error"]["message"]
        assert client.get("/v1/models").status_code == 200  # on the same kept-alive connection
