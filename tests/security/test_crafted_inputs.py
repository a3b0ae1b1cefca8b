"""Inputs crafted to reach a traceback get a 400 naming the field (a close code on the WebSocket), and
nothing of the run is left behind: no run counted in flight, no record of a run that never began."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.security.conftest import SharedGateway
from tests.support.agent_loop import USER, inline
from tests.support.replicas import ServeProcess
from tests.support.servers import wait_until


def runs_in_flight(gateway: ServeProcess) -> float:
    text = httpx.get(f"{gateway.url}/metrics").text
    return float(re.search(r"^hatchway_runs_in_flight (\S+)$", text, re.MULTILINE).group(1))


def statuses_recorded(gateway: ServeProcess, key: str) -> list[int]:
    """The run records' HTTP statuses, oldest first, once a last request's record is written: a
    model that does not exist (404), whose record, written after those of earlier requests, shows
    they are all in."""
    gateway.http("POST", "/v1/chat/completions", key, json={"model": "nope", "messages": USER})

    def written() -> list[int] | None:
        data = gateway.http("GET", "/v1/logs", key).json()["data"]
        return [r["http_status"] for r in reversed(data)] if data and data[0]["http_status"] == 404 else None

    return wait_until(written, message="the last request's run record")


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "host", ["mcp.example.com\uff0fadmin", "mcp.example.com\uff03x", "mcp.example.com:99999"]
)
def test_an_unsplittable_inline_server_url_is_a_400_naming_the_field(
    default_gateway: SharedGateway, host: str
) -> None:
    gateway, key = default_gateway.process, default_gateway.new_key()
    plugin = inline({"mcp_servers": [{"id": "s", "url": f"https://{host}/mcp"}]})
    answer = gateway.http(
        "POST",
        "/v1/chat/completions",
        key,
        json={"model": "gpt-4o", "messages": USER},
        headers={"hatchway-mcp-plugin": plugin},
    )
    error = answer.json()["error"]
    assert answer.status_code == 400, answer.text
    assert (error["code"], error["param"]) == ("invalid_plugin", "hatchway-mcp-plugin")
    assert "mcp_servers[0].url" in error["message"]
    assert statuses_recorded(gateway, key) == [400, 404]  # the refused run, recorded as such
    assert runs_in_flight(gateway) == 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_pass_through_field_nested_300_deep_is_a_400_with_its_path(
    default_gateway: SharedGateway, path: str
) -> None:
    gateway, key = default_gateway.process, default_gateway.new_key()
    body = {"model": "gpt-4o", "messages": USER, "input": "go", "x_vendor": {"filters": nested(300)}}
    answer = gateway.http("POST", path, key, json=body)

    error = answer.json()["error"]
    assert answer.status_code == 400, answer.text
    assert error["param"] == "x_vendor.filters" + "[0]" * 126  # the body is level 1, the 129th refused
    assert "nested deeper than 128 levels" in error["message"]
    assert runs_in_flight(gateway) == 0
    # Chat Completions records every authenticated request; Responses, every response it creates.
    assert statuses_recorded(gateway, key) == ([400, 404] if path == "/v1/chat/completions" else [404])


def test_json_nested_as_deep_as_allowed_is_served(default_gateway: SharedGateway) -> None:
    gateway, key = default_gateway.process, default_gateway.new_key()
    body = {"model": "nope", "messages": USER, "x_vendor": nested(120)}
    answer = gateway.http("POST", "/v1/chat/completions", key, json=body)
    assert answer.json()["error"]["code"] == "model_not_found"  # read and validated, not refused as deep


def test_a_binary_websocket_frame_closes_with_unsupported_data(default_gateway: SharedGateway) -> None:
    gateway, key = default_gateway.process, default_gateway.new_key()
    url = gateway.url.replace("http", "ws") + "/v1/responses"
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(b'{"type": "response.create"}')
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    assert "Traceback" not in gateway.log()


def test_a_websocket_message_nested_300_deep_is_an_error_event(default_gateway: SharedGateway) -> None:
    gateway, key = default_gateway.process, default_gateway.new_key()
    url = gateway.url.replace("http", "ws") + "/v1/responses"
    message = {"type": "response.create", "model": "gpt-4o", "input": "go", "x_vendor": nested(300)}
    with connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        ws.send(json.dumps(message))
        event = json.loads(ws.recv(timeout=10))
    assert event["type"] == "error" and event["status"] == 400
    assert event["error"]["param"] == "x_vendor" + "[0]" * 127
    assert runs_in_flight(gateway) == 0
