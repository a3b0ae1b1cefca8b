"""`hatchway serve` stopped (SIGTERM) while requests are in flight: each one is answered, and every
answered request has its run-log record in the database once the process has exited."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import yaml

from tests.support.cli import HATCHWAY
from tests.support.gateway import create_org_key
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import accepts_connections, free_port, wait_until

IN_FLIGHT = 8


def test_sigterm_answers_requests_in_flight_and_keeps_their_log_records(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    db_path = tmp_path / "h.db"
    config = tmp_path / "hatchway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": f"sqlite+aiosqlite:///{db_path}",
                "providers": [{"id": "upstream", "base_url": llm.base_url}],
                "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o-2024"}],
            }
        )
    )
    key = asyncio.run(create_org_key(f"sqlite+aiosqlite:///{db_path}")).key
    gate = threading.Event()
    llm.default = Reply(text="held until the gateway is stopping", gate=gate)
    port = free_port()
    proc = subprocess.Popen(
        [*HATCHWAY, "serve", "--config", str(config), "--port", str(port), "--log-level", "warning"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(lambda: accepts_connections(port), timeout=120, message="hatchway serve to listen")

        def ask(i: int) -> httpx.Response:
            return httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": f"question {i}"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            )

        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            answers = [pool.submit(ask, i) for i in range(IN_FLIGHT)]
            wait_until(lambda: len(llm.requests) == IN_FLIGHT, timeout=30, message="every request upstream")
            proc.send_signal(signal.SIGTERM)
            wait_until(
                lambda: not accepts_connections(port), timeout=120, message="the gateway to stop listening"
            )
            gate.set()  # only now does the upstream answer: the gateway is shutting down
            responses = [answer.result(timeout=30) for answer in answers]
        _, stderr = proc.communicate(timeout=120)
    finally:
        gate.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert [r.status_code for r in responses] == [200] * IN_FLIGHT, stderr
    assert proc.returncode == 0, stderr  # a drained stop is a clean exit, not death by SIGTERM (143)
    assert all(r.json()["choices"][0]["message"]["content"] for r in responses)
    log_ids = {r.headers["x-hatchway-request-id"] for r in responses}
    with sqlite3.connect(db_path) as db:
        stored = {row[0] for row in db.execute("SELECT id FROM request_logs WHERE status = 'ok'")}
    assert log_ids <= stored


def test_drain_seconds_bounds_the_wait_for_a_request_that_never_ends(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    """``drain_seconds``: past it the gateway closes what is still open and exits 0 (without it, an
    upstream that never answers would hold the stop until the container runtime kills the process)."""
    db_path = tmp_path / "h.db"
    config = tmp_path / "hatchway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": f"sqlite+aiosqlite:///{db_path}",
                "providers": [{"id": "upstream", "base_url": llm.base_url}],
                "models": [{"name": "gpt-4o", "provider": "upstream"}],
                "drain_seconds": 1,
            }
        )
    )
    key = asyncio.run(create_org_key(f"sqlite+aiosqlite:///{db_path}")).key
    never = threading.Event()
    llm.default = Reply(text="never sent", gate=never)
    port = free_port()
    proc = subprocess.Popen(
        [*HATCHWAY, "serve", "--config", str(config), "--port", str(port), "--log-level", "info"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: accepts_connections(port), timeout=120, message="hatchway serve to listen")
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                httpx.post,
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hang"}]},
                headers={"authorization": f"Bearer {key}"},
                timeout=120,
            )
            wait_until(lambda: len(llm.requests) == 1, timeout=30, message="the request upstream")
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=90)  # the upstream is still holding the answer
            assert not never.is_set()
            try:
                answer.result(timeout=30)
            except httpx.HTTPError:
                pass  # closed by the gateway once the drain ran out: what drain_seconds promises
    finally:
        never.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "Cancel" in stderr or "timeout" in stderr.lower() or "Waiting for" in stderr, stderr[-2000:]
