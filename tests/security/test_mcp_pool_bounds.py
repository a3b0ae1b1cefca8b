"""The MCP session pool cannot be grown without bound by a caller naming new servers: sessions are bounded
per organisation (the least recently used closes), idle ones expire, and the process's file descriptors
and memory come back. Measured on ``hatchway serve`` as its own process, from /proc."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tests.support.agent_loop import USER, inline, rounds, summarise
from tests.support.gateway import create_org_key
from tests.support.mcp_servers import McpTestServer
from tests.support.replicas import Replicas, ServeProcess
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until


def open_fds(process: ServeProcess) -> int:
    return len(list(Path(f"/proc/{process.proc.pid}/fd").iterdir()))


def connections_to(process: ServeProcess, port: int) -> int:
    """The process's established TCP connections to ``port``: its sockets (``/proc/<pid>/fd``) that
    ``/proc/<pid>/net/tcp*`` lists as connected there. Counting these, not every descriptor, leaves out
    what else the process opens meanwhile (a database connection, the upstream's keep-alive)."""
    pid = process.proc.pid
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:  # closed between the listing and the read
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and inode in sockets:
                count += 1
    return count


def rss_mib(process: ServeProcess) -> float:
    status = Path(f"/proc/{process.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def test_many_distinct_inline_servers_leave_a_bounded_pool_that_drains_when_idle(
    mcp_server_factory: Callable[..., McpTestServer], llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    database = f"sqlite+aiosqlite:///{tmp_path / 'pool.db'}"
    replicas = Replicas(
        tmp_path,
        {
            "database_url": database,
            "master_key_file": str(tmp_path / "master.key"),
            "providers": [{"id": "upstream", "base_url": llm.base_url}],
            "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"}],
            "allow_private_mcp_urls": True,  # the test's servers are on loopback
            "mcp_pool": {"max_sessions_per_organisation": 8, "idle_seconds_inline": 3},
        },
    )
    try:
        gateway = replicas.serve("gateway")
        client = gateway.client(asyncio.run(create_org_key(database)).key)
        llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
        first = inline({"mcp_servers": [{"id": "s", "url": f"{server.url}?n=0"}]})
        client.chat.completions.create(
            model="gpt-4o", messages=USER, extra_headers={"hatchway-mcp-plugin": first}
        )
        port = server.server.port
        fds, rss = open_fds(gateway), rss_mib(gateway)
        assert connections_to(gateway, port) >= 1, "the first session is open"

        for n in range(1, 60):  # 59 more servers, each a URL of its own: a session of its own
            plugin = inline({"mcp_servers": [{"id": "s", "url": f"{server.url}?n={n}"}]})
            client.chat.completions.create(
                model="gpt-4o", messages=USER, extra_headers={"hatchway-mcp-plugin": plugin}
            )

        assert open_fds(gateway) - fds < 8 * 4, "more sessions than max_sessions_per_organisation stayed open"
        assert connections_to(gateway, port) <= 8 * 2, "more sessions than max_sessions_per_organisation"
        assert rss_mib(gateway) - rss < 40
        drained = lambda: connections_to(gateway, port) == 0  # noqa: E731
        wait_until(drained, timeout=30, message="the idle sessions to close")
    finally:
        replicas.stop()
