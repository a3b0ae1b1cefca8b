"""``hatchway mcp probe --oauth``: the person running the probe authorizes as themselves.

The probe prints the authorization link and waits for the redirect on its loopback port; here the
"person" is httpx: it opens the link, signs in on the Authlib authorization server's page and
follows the redirect to the probe's listener. The probe then calls ``whoami`` with that user's
token. (``--oauth-headless`` is what the conformance suite drives.)
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import HATCHWAY
from tests.support.oauth_server import AuthorizedMcpServer, OAuthTestServer
from tests.support.servers import free_port

AUTHORIZE = re.compile(r"http://127\.0\.0\.1:\d+/authorize\?\S+")


@pytest.fixture
def servers() -> Iterator[tuple[OAuthTestServer, AuthorizedMcpServer, int]]:
    port = free_port()
    idp = OAuthTestServer(
        users={"carol": "pw-carol"}, redirect_uri=f"http://127.0.0.1:{port}/callback"
    ).start()
    mcp = AuthorizedMcpServer(idp).start()
    yield idp, mcp, port
    mcp.stop()
    idp.stop()


def test_the_probe_authorizes_as_the_person_running_it(
    servers: tuple[OAuthTestServer, AuthorizedMcpServer, int], tmp_path: Path
) -> None:
    idp, mcp, port = servers
    command = [
        *HATCHWAY,
        "mcp",
        "probe",
        mcp.url,
        "--oauth",
        "--no-browser",
        "--redirect-port",
        str(port),
        "--client-id",
        idp.client.client_id,
        "--client-secret-stdin",
        "--call",
        "whoami",
        "--timeout",
        "60",
    ]
    probe = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert probe.stdin is not None and probe.stderr is not None
    probe.stdin.write(idp.client.client_secret)
    probe.stdin.close()
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in probe.stderr], daemon=True).start()
    try:
        link = None
        deadline = time.monotonic() + 120  # the probe starting up, on a machine however busy
        while link is None and time.monotonic() < deadline:
            try:
                found = AUTHORIZE.search(lines.get(timeout=1))
            except queue.Empty:
                continue
            link = found.group(0) if found else None
        assert link is not None, "the probe printed no authorization link"

        login = httpx.get(link)
        assert login.status_code == 200 and "Sign in" in login.text
        query = link.split("?", 1)[1]
        approved = httpx.post(
            f"{idp.issuer}/authorize?{query}",
            data={"username": "carol", "password": "pw-carol", "consent": "allow"},
        )
        assert approved.status_code == 302
        redirect = approved.headers["location"]
        assert redirect.startswith(f"http://127.0.0.1:{port}/callback?")
        assert "Authorized" in httpx.get(redirect).text

        probe.wait(timeout=60)
        assert probe.stdout is not None
        out = probe.stdout.read()
    finally:
        if probe.poll() is None:
            probe.kill()
    assert probe.returncode == 0, out
    assert "call whoami: ok" in out and "user:carol" in out
    assert mcp.calls == ["carol"]
