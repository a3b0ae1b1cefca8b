"""deploy/: the nginx config (verbatim but for its ports) in front of two real ``hatchway serve``
replicas and a ``hatchway worker`` on PostgreSQL and Redis, and the files agreeing with each other.

What this does not test: running deploy/Procfile itself with a Procfile runner (none is installed
here). Skips with the reason when nginx is not installed (``apt-get install nginx-light``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from hatchway.config.settings import load_settings
from tests.support.backends import PG_URL, REDIS_URL
from tests.support.gateway import OrgKey, create_org_key
from tests.support.paths import ROOT
from tests.support.replicas import Replicas, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import answers_healthz, free_port, wait_until

DEPLOY = ROOT / "deploy"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
needs_nginx = pytest.mark.skipif(
    not os.path.exists(NGINX), reason="nginx not installed (apt-get install nginx-light)"
)


def procfile() -> dict[str, str]:
    lines = (DEPLOY / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line and not line.startswith("#"))


def nginx_files(tmp_path: Path, listen: int, replicas: list[int]) -> tuple[Path, Path]:
    """deploy/nginx/ copied with its ports replaced; returns (run dir, main config)."""
    conf = tmp_path / "nginx"
    conf.mkdir()
    snippet = (DEPLOY / "nginx" / "hatchway.conf").read_text()
    snippet = snippet.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{listen};")
    for shipped, port in zip(("8081", "8082"), replicas, strict=True):
        snippet = snippet.replace(f"server 127.0.0.1:{shipped} ", f"server 127.0.0.1:{port} ")
    (conf / "hatchway.conf").write_text(snippet)
    shutil.copy(DEPLOY / "nginx" / "nginx.conf", conf / "nginx.conf")
    run = tmp_path / "run"
    run.mkdir()
    return run, conf / "nginx.conf"


def test_the_files_agree() -> None:
    processes = procfile()
    settings = load_settings(DEPLOY / "hatchway.yaml")  # a valid config…
    assert settings.redis_url and settings.database_url.startswith("postgresql")  # …for replicas
    assert settings.background.serve_concurrency == 0 and "hatchway worker" in processes["worker"]
    upstreams = re.findall(r"server 127\.0\.0\.1:(\d+)", (DEPLOY / "nginx" / "hatchway.conf").read_text())
    served = sorted(re.search(r"--port (\d+)", c).group(1) for n, c in processes.items() if "serve" in c)  # type: ignore[union-attr]
    assert sorted(upstreams) == served == ["8081", "8082"]


@needs_nginx
def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    run, main = nginx_files(tmp_path, free_port(), [free_port(), free_port()])

    checked = subprocess.run(
        [NGINX, "-t", "-p", str(run), "-c", str(main), "-e", "stderr"], capture_output=True, text=True
    )

    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr


def _requests_served(metrics: str, route: str) -> float:
    pattern = rf'^hatchway_http_requests_total\{{[^}}]*route="{re.escape(route)}"[^}}]*\}} (\S+)$'
    return sum(float(v) for v in re.findall(pattern, metrics, flags=re.M))


@needs_nginx
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(
    not (PG_URL and REDIS_URL), reason="needs HATCHWAY_TEST_DATABASE_URL and HATCHWAY_TEST_REDIS_URL"
)
def test_two_replicas_and_a_worker_behind_nginx(
    tmp_path: Path, pg_database_url: str, llm: ScriptedLLM
) -> None:
    prefix = unique_redis_prefix()
    replicas = Replicas(tmp_path, replica_config(tmp_path, pg_database_url, REDIS_URL, prefix, llm.base_url))
    nginx: subprocess.Popen[bytes] | None = None
    nginx_log = (tmp_path / "nginx.log").open("wb")
    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        replicas.worker("w")
        listen = free_port()
        run, main = nginx_files(tmp_path, listen, [a.port, b.port])
        nginx = subprocess.Popen([NGINX, "-p", str(run), "-c", str(main), "-e", "stderr"], stderr=nginx_log)
        front = f"http://127.0.0.1:{listen}"
        wait_until(lambda: answers_healthz(front), timeout=120, interval=0.1, message="nginx to answer")
        org: OrgKey = asyncio.run(create_org_key(pg_database_url))
        client = openai.OpenAI(base_url=f"{front}/v1", api_key=org.key, max_retries=0, timeout=60)
        llm.default = Reply(text="through the balancer, in several chunks")

        answers = [
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
            for _ in range(6)
        ]
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "stream"}], stream=True
            )
        )
        queued = client.responses.create(model="gpt-4o", input="background", background=True)
        done = wait_until(
            lambda: (r := client.responses.retrieve(queued.id)).status == "completed" and r,
            timeout=60,
            interval=0.1,
            message="the background response",
        )

        assert {a.choices[0].message.content for a in answers} == {"through the balancer, in several chunks"}
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == llm.default.text
        assert len(chunks) > 3  # server-sent events came through unbuffered, as several chunks
        assert done.output_text == llm.default.text
        for replica in (a, b):  # round-robin: both replicas served chat completions
            metrics = httpx.get(f"{replica.url}/metrics").text
            assert _requests_served(metrics, "/v1/chat/completions") >= 2, replica.name
        client.close()
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(10)
        nginx_log.close()
        replicas.stop()
        purge_redis(REDIS_URL, prefix)
