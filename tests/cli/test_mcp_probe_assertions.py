"""``hatchway mcp probe`` with the assertion grants' options and ``--json``, as a real process."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.cli.test_mcp_probe import probe
from tests.support.mcp_servers import McpTestServer
from tests.support.servers import ServerThread


class Address(BaseModel):
    street: str
    city: str


@pytest.fixture
def schema_server() -> Iterator[tuple[str, MCPServer]]:
    mcp = MCPServer("schemas", log_level="WARNING")

    @mcp.tool(description="Ship to an address (a schema with $defs and $ref).")
    def ship(address: Address, express: bool = False) -> str:
        return f"shipped to {address.city}"

    thread = ServerThread(mcp.streamable_http_app(), timeout_graceful_shutdown=1).start()
    yield f"{thread.url}/mcp", mcp
    thread.stop()


async def _listed_schema(mcp: MCPServer) -> dict:
    return next(t for t in await mcp.list_tools() if t.name == "ship").input_schema


def test_json_prints_each_tools_schema_exactly_as_the_server_sent_it(
    schema_server: tuple[str, MCPServer], tmp_path: Path
) -> None:
    import asyncio

    url, mcp = schema_server
    result = probe(url, "--json", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    listing = json.loads(result.stdout)
    schema = next(t for t in listing["tools"] if t["name"] == "ship")["inputSchema"]
    assert schema == asyncio.run(_listed_schema(mcp))
    assert "$defs" in schema and schema["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert listing["server"]["name"] == "schemas" and listing["calls"] == []


@pytest.fixture
def token_endpoint() -> Iterator[tuple[str, list[dict[str, str]]]]:
    forms: list[dict[str, str]] = []

    async def token(request: Request) -> Response:
        forms.append({k: str(v) for k, v in (await request.form()).items()})
        return JSONResponse({"access_token": "wl-token", "token_type": "Bearer", "expires_in": 60})

    thread = ServerThread(Starlette(routes=[Route("/token", token, methods=["POST"])])).start()
    yield f"{thread.url}/token", forms
    thread.stop()


def test_a_workload_assertion_on_stdin_gets_the_token(
    mcp_server_factory: Callable[..., McpTestServer],
    token_endpoint: tuple[str, list[dict[str, str]]],
    tmp_path: Path,
) -> None:
    token_url, forms = token_endpoint
    server = mcp_server_factory("workload", required_bearer="wl-token")

    result = probe(
        server.url, "--oauth-token-url", token_url, "--client-id", "wl", "--assertion-stdin",
        "--call", "add", "--args", '{"a": 1, "b": 1}', cwd=tmp_path, stdin="the.workload.jwt\n",
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("2")
    assert forms[0]["assertion"] == "the.workload.jwt" and forms[0]["client_id"] == "wl"
    assert "the.workload.jwt" not in result.stdout + result.stderr


def test_the_options_that_do_not_go_together_are_refused(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/mcp"
    cases = [
        (["--dpop"], "--dpop goes with --oauth"),
        (["--assertion-env", "A", "--assertion-file", "/x"], "give one of --assertion-file"),
        (["--oauth-token-url", "http://127.0.0.1:9/t", "--subject-token-env", "T"], "--subject-token-*"),
        (
            ["--oauth-token-url", "http://127.0.0.1:9/t", "--idp-token-url", "http://127.0.0.1:9/i",
             "--subject-token-env", "T", "--client-id", "c"],
            "confidential client",
        ),
    ]  # fmt: skip
    for options, expected in cases:
        result = probe(url, *options, cwd=tmp_path)
        assert result.returncode == 2, (options, result.stderr)
        assert expected in result.stderr.replace("\n", " "), (options, result.stderr)
