"""A gateway that only passes chat completions through loads none of the heavy optional libraries.

Resident memory is one of the gateway's measured figures (bench/run.py): the MCP SDK (~25 MiB),
cryptography's OpenSSL bindings (~7 MiB), PyJWT, the job queue, Alembic, the OpenTelemetry SDK,
genai-prices' table and python-stdnum are imported when a configuration or a request needs them,
not by serving.
Checked in a fresh interpreter that starts the ASGI app (its lifespan, as uvicorn runs it) and
answers one completion from a real upstream.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.gateway import create_org_key
from tests.support.scripted_llm import Reply, ScriptedLLM

HEAVY = (
    "mcp",
    "cryptography",
    "jwt",
    "saq",
    "alembic",
    "aiohttp",
    "httpx",
    "redis",
    "openai",
    "opentelemetry.sdk",  # tracing is off: the API is enough
    "genai_prices.data",  # the price table (~6 MiB): no vendor prices a loopback upstream's model
    "sqlalchemy.dialects.postgresql",  # every PostgreSQL driver's dialect module (~2 MiB), on SQLite
    "stdnum",  # the PII guard's checksums (~2 MiB with the Unicode table it builds): no tool result here
)

_SERVE_ONE = """
import asyncio, json, sys
from hatchway.api.app import create_app
from hatchway.config.settings import load_settings

async def main(config, key):
    app = create_app(load_settings(config), freeze_heap=True)
    inbox, outbox = asyncio.Queue(), asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    lifespan = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
        "headers": [(b"authorization", b"Bearer " + key.encode()), (b"content-type", b"application/json")],
    }
    await app(scope, receive, send)
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
    await lifespan
    answer = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    heavy = sys.argv[3].split(",")
    print(json.dumps({
        "status": sent[0]["status"],
        "text": answer["choices"][0]["message"]["content"],
        "loaded": sorted(name for name in heavy if name in sys.modules),
    }))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_pass_through_serving_loads_no_optional_library(tmp_path: Path) -> None:
    llm = ScriptedLLM().start()
    try:
        llm.default = Reply("passed through")
        database_url = f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}"
        config = tmp_path / "hatchway.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "database_url": database_url,
                    "master_key_file": str(tmp_path / "master.key"),
                    "providers": [{"id": "up", "base_url": llm.base_url}],
                    "models": [{"name": "m", "provider": "up", "upstream_model": "up-model"}],
                }
            )
        )
        key = asyncio.run(create_org_key(database_url)).key
        done = subprocess.run(
            [sys.executable, "-c", _SERVE_ONE, str(config), key, ",".join(HEAVY)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        llm.stop()
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["status"] == 200
    assert outcome["text"] == "passed through"
    assert outcome["loaded"] == []
