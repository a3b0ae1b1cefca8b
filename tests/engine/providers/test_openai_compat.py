"""The upstream client on its own: pooled connections the upstream closed never surface as errors."""

from __future__ import annotations

import pytest

from hatchway.engine.items import Message
from hatchway.engine.providers.base import ModelRequest
from hatchway.engine.providers.openai_compat import OpenAICompatProvider
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def short_keepalive_llm():
    # uvicorn closes idle keep-alive connections after this long (its default is 5 s).
    server = ScriptedLLM(timeout_keep_alive=0.2).start()
    server.default = Reply("still here")
    yield server
    server.stop()


def _open_connections(llm: ScriptedLLM) -> int:
    return len(llm.server.server.server_state.connections)


async def test_idle_connection_closed_by_upstream_is_not_an_error(short_keepalive_llm: ScriptedLLM) -> None:
    provider = OpenAICompatProvider("up", short_keepalive_llm.base_url, timeout=5)
    request = ModelRequest(model="m", items=[Message(role="user", content="hi")])
    try:
        for _ in range(5):
            response = await provider.request(request)
            assert response.text == "still here"
            # The upstream drops the idle pooled connection; the next request must not see a 5xx.
            wait_until(lambda: _open_connections(short_keepalive_llm) == 0, timeout=5, message="idle close")
        streamed = [event async for event in provider.stream(request)]
        assert streamed[-1].response.text == "still here"
    finally:
        await provider.aclose()
    assert len(short_keepalive_llm.requests) == 6
