"""The example ``contas`` MCP server (examples/contas_server.py) on a loopback port, for tests."""

from __future__ import annotations

from examples.contas_server import ContasBackend, create_app

from tests.support.mcp_caller import ClientCaller
from tests.support.servers import ServerThread


class RunningContas:
    """The server under uvicorn; ``backend`` counts executions per idempotency key."""

    def __init__(self) -> None:
        self.backend = ContasBackend()
        self.server = ServerThread(create_app(self.backend))

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"

    def caller(self, **servers: str) -> ClientCaller:
        """A caller that reaches this server as ``contas`` (plus any other ids given)."""
        return ClientCaller({"contas": self.url, **servers})

    def start(self) -> RunningContas:
        self.server.start()
        return self

    def stop(self) -> None:
        if self.backend.gate is not None:
            self.backend.gate.set()  # never leave a held execution behind
        self.server.stop()
