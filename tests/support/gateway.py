"""Start Hatchway itself under uvicorn on loopback, with a fresh organisation and key."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from hatchway.api.app import create_app
from hatchway.api.http_protocol import HatchwayHttpProtocol, HttpLimits
from hatchway.config.settings import load_settings
from hatchway.gateway import Gateway
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.support.servers import ServerThread


@dataclass
class OrgKey:
    org_id: str
    org_name: str
    key: str


async def create_org_key(database_url: str, org_name: str | None = None, role: Role = Role.ADMIN) -> OrgKey:
    """A new organisation and a key of it: an ``admin`` key unless told otherwise, as every key was
    before key roles (the tests that predate them call, confirm and read with one key)."""
    db = Database(database_url)
    try:
        await db.migrate()
        store = OrgStore(db)
        org = await store.create_org(org_name or f"org-{uuid.uuid4().hex[:8]}")
        _, key = await store.create_key(org.id, role=role)
        return OrgKey(org.id, org.name, key)
    finally:
        await db.close()


class RunningGateway:
    """A live gateway; ``client()`` gives an official ``openai`` client pointed at it."""

    def __init__(self, config_path: Path, *, port: int = 0, **gateway_options: Any) -> None:
        self.config_path = config_path
        self.settings = load_settings(config_path)
        self.gateway = Gateway(self.settings, **gateway_options)
        # Served as `hatchway serve` serves it: its request limits, one write per response of known length.
        self.server = ServerThread(
            create_app(self.settings, gateway=self.gateway),
            port=port,
            http=HatchwayHttpProtocol.with_limits(HttpLimits.of(self.settings)),
        )
        self.org: OrgKey | None = None
        self._clients: list[openai.OpenAI] = []

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def key(self) -> str:
        assert self.org is not None
        return self.org.key

    def start(self, org: OrgKey | None = None) -> RunningGateway:
        """Serve; with ``org``, as that existing organisation (a restart of an earlier gateway)."""
        self.org = org or asyncio.run(create_org_key(self.settings.database_url))
        self.server.start()
        return self

    def stop(self) -> None:
        for client in self._clients:  # their keep-alive sockets would otherwise warn when collected
            client.close()
        self._clients.clear()
        self.server.stop()

    def new_org(self, name: str | None = None) -> OrgKey:
        return asyncio.run(create_org_key(self.settings.database_url, name))

    def put_secret(
        self, name: str, value: str, *, key: str | None = None, allowed_hosts: list[str] | None = None
    ) -> httpx.Response:
        """``PUT /v1/secrets/{name}`` as this gateway's organisation (or ``key``'s)."""
        body: dict[str, Any] = {"value": value}
        if allowed_hosts is not None:
            body["allowed_hosts"] = allowed_hosts
        return httpx.put(  # the clients' timeout (30 s): a starved CI worker once took over httpx's 5
            f"{self.url}/v1/secrets/{name}",
            json=body,
            headers={"authorization": f"Bearer {key or self.key}"},
            timeout=30.0,
        )

    def client(self, key: str | None = None, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("max_retries", 0)
        kwargs.setdefault("timeout", 30.0)
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=key or self.key, **kwargs)
        self._clients.append(client)
        return client


def write_config(tmp_path: Path, config: dict[str, Any], name: str = "hatchway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def base_config(
    tmp_path: Path, upstream_url: str, database_url: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "database_url": database_url or f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}",
        "master_key_file": str(tmp_path / "master.key"),
        "providers": [{"id": "upstream", "base_url": upstream_url, "timeout_seconds": 5}],
        "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o-2024"}],
        **extra,
    }
