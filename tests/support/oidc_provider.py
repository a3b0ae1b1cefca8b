"""A real OpenID provider on loopback for the SSO tests: the npm package ``oidc-provider`` (pinned in
``.ci/node-tools.json``), run by Node from ``tests/support/oidc_provider.mjs``.

    provider = OidcProvider(client_id, client_secret, redirect_uris, accounts).start()
    provider.issuer     # http://127.0.0.1:<port>
    provider.stop()

Its development login page (``devInteractions``) takes any password for the accounts given; each
account's claims (``groups``, ``name``, ``email``) are released for the ``profile``, ``email`` and
``groups`` scopes, from the userinfo endpoint (the provider keeps ID tokens to the standard claims).
Skips the test (or fails it under ``HATCHWAY_REQUIRE_NODE_TOOLS``) when Node or the package is absent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.node_tools import node_bin, node_env, package_file
from tests.support.servers import free_port, wait_until

SCRIPT = Path(__file__).with_name("oidc_provider.mjs")


class OidcProvider:
    """``oidc-provider`` as a child process, with its log kept for failure messages."""

    def __init__(
        self,
        client_id: str,
        client_secret: str,
        redirect_uris: list[str],
        accounts: dict[str, dict[str, Any]],
        log_path: Path,
    ) -> None:
        self.entry = package_file("oidc-provider", "lib/index.js")
        self.port = free_port()
        self.options = {
            "client_id": client_id,
            "client_secret": client_secret,
            "redirect_uris": redirect_uris,
            "accounts": accounts,
        }
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 60.0) -> OidcProvider:
        args = [
            str(node_bin() / "node"),
            str(SCRIPT),
            str(self.entry),
            str(self.port),
            json.dumps(self.options),
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, env=node_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(
                self._answers, timeout=timeout, interval=0.1, message="oidc-provider's discovery document"
            )
        except AssertionError as exc:
            self.stop()
            raise AssertionError(f"{exc}\n{self.log()}") from None
        return self

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"oidc-provider exited with {self.proc.returncode}:\n{self.log()}")
        try:
            answer = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2.0)
        except httpx.TransportError:
            return False
        return answer.status_code == 200 and answer.json()["issuer"] == self.issuer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
