"""The container image, run for real (issue 44): built from this checkout by ``.ci/image-test``
(``make image-test``), which names it in ``HATCHWAY_TEST_IMAGE``; skipped without it (``make test``
does not build images: a build takes minutes).

Containers run with ``--network host`` (these machines' Docker engine has no bridge), so the scripted
upstream, PostgreSQL and Redis on loopback are theirs too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

import hatchway
from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL, fresh_pg_database
from tests.support.paths import ROOT
from tests.support.replicas import purge_redis, unique_redis_prefix
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port, wait_until

IMAGE = os.environ.get("HATCHWAY_TEST_IMAGE", "")
pytestmark = pytest.mark.skipif(
    not IMAGE, reason="the image tests run in .ci/image-test (make image-test), which builds the image"
)
UID = 10001


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


class Container:
    """A detached container of the image on the host's network; removed at the end."""

    def __init__(self, name: str, args: list[str], *, env: dict[str, str], mounts: list[str]) -> None:
        self.name = f"hatchway-test-{name}-{uuid.uuid4().hex[:6]}"
        options = ["--network", "host", "--read-only", "--tmpfs", "/tmp", "--name", self.name]
        for key, value in env.items():
            options += ["-e", f"{key}={value}"]
        for mount in mounts:
            options += ["-v", mount]
        docker("run", "-d", *options, IMAGE, *args)

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def running(self) -> bool:
        return docker("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip() == "true"

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.name, *args, check=check)

    def wait(self, timeout: float = 120) -> int:
        return int(docker("wait", self.name, timeout=timeout).stdout.strip())

    def remove(self) -> None:
        docker("rm", "-f", "-v", self.name, check=False)


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    made: list[Container] = []
    yield made
    for container in made:
        container.remove()


@pytest.fixture
def volume() -> Iterator[str]:
    """A new named volume for /var/lib/hatchway (Docker copies the image's owner, uid 10001, into it)."""
    name = f"hatchway-test-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", name)
    yield name
    # Torn down before ``containers`` when both are used: whatever still holds the volume goes first.
    holders = docker("ps", "-aq", "--filter", f"volume={name}", check=False).stdout.split()
    if holders:
        docker("rm", "-f", "-v", *holders, check=False)
    docker("volume", "rm", "-f", name, check=False)


@pytest.fixture
def upstream() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM()
    with llm.server:
        yield llm


def write_config(tmp_path: Path, settings: dict[str, Any]) -> Path:
    path = tmp_path / "hatchway.yaml"
    path.write_text(yaml.safe_dump(settings))
    path.chmod(0o644)  # read by uid 10001 through the bind mount
    tmp_path.chmod(0o755)
    return path


def base_settings(upstream: ScriptedLLM) -> dict[str, Any]:
    return {
        "providers": [{"id": "up", "base_url": upstream.base_url, "api_key": "env:UPSTREAM_KEY"}],
        "models": [{"name": "gpt-4o", "provider": "up"}],
    }


def serve(
    containers: list[Container], name: str, config: Path, *, env: dict[str, str], mounts: list[str]
) -> tuple[Container, str, float]:
    """A gateway container on a free loopback port; returns it, its URL and the seconds it took to
    answer ``/readyz`` 200 from ``docker run``."""
    port = free_port()
    started = time.monotonic()
    container = Container(
        name,
        ["serve", "--host", "127.0.0.1", "--port", str(port)],
        env={"UPSTREAM_KEY": "sk-upstream", **env},
        mounts=[f"{config}:/etc/hatchway/hatchway.yaml:ro", *mounts],
    )
    containers.append(container)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not container.running():
            raise AssertionError(f"{name} exited:\n{container.logs()[-3000:]}")
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout=90, interval=0.05, message=f"{name} never became ready")
    return container, url, time.monotonic() - started


def create_key(container: Container) -> str:
    org = f"acme-{uuid.uuid4().hex[:6]}"
    container.exec("hatchway", "orgs", "create", org)
    key = container.exec("hatchway", "keys", "create", "--org", org, "--role", "admin").stdout.strip()
    assert key.startswith("hw-") or len(key) > 20, key
    return key


def test_the_image_says_its_version_and_holds_no_build_tools_or_ca() -> None:
    labels = json.loads(docker("image", "inspect", IMAGE, "--format", "{{json .Config.Labels}}").stdout)
    assert labels["org.opencontainers.image.version"] == hatchway.__version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"] not in ("", "unknown")
    config = json.loads(docker("image", "inspect", IMAGE, "--format", "{{json .Config}}").stdout)
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"][:2] == ["tini", "--"]
    assert "/readyz" in " ".join(config["Healthcheck"]["Test"])
    assert "/var/lib/hatchway" in config["Volumes"]
    assert docker("run", "--rm", IMAGE, "--version").stdout.strip() == f"hatchway {hatchway.__version__}"

    # What the build stage had stays there: no pip, no build backend, no compiler, no CA bundle.
    probe = """
import importlib.metadata as m, json, os, shutil
print(json.dumps({
    "dists": sorted(f"{d.metadata['Name']}=={d.version}" for d in m.distributions()),
    "tools": [t for t in ("pip", "gcc", "cc", "strip") if shutil.which(t)],
    "files": [
        p for p in ("/tmp/pip-ca.pem", "/tmp/docker", "/src", "/wheels", "/opt/build") if os.path.exists(p)
    ],
}))
"""
    found = json.loads(docker("run", "--rm", "--entrypoint", "python3", IMAGE, "-c", probe).stdout)
    assert found["tools"] == [] and found["files"] == []
    lines = (ROOT / "deploy/docker/requirements.txt").read_text().splitlines()
    pins = [line.split(";")[0].strip().split("==") for line in lines if line and not line.startswith("#")]
    pinned = {name.lower().replace("_", "-"): version for name, version in pins}
    installed = {d.split("==")[0].lower().replace("_", "-"): d.split("==")[1] for d in found["dists"]}
    assert installed.pop("hatchway") == hatchway.__version__
    # Exactly the lock: nothing floated, nothing unpinned (a line with a marker may not apply here).
    conditional = {p[0].lower() for p in pins if any(";" in line and line.startswith(p[0]) for line in lines)}
    assert {k: v for k, v in pinned.items() if k in installed or k not in conditional} == installed


def test_serves_on_sqlite_as_non_root_on_a_read_only_root(
    tmp_path: Path, containers: list[Container], volume: str, upstream: ScriptedLLM
) -> None:
    config = write_config(tmp_path, base_settings(upstream))  # the image's state paths: cwd-relative
    state = [f"{volume}:/var/lib/hatchway"]
    gateway, url, seconds = serve(containers, "sqlite", config, env={}, mounts=state)
    print(f"docker run to /readyz 200 on SQLite: {seconds:.2f} s")

    upstream.reply("hello from the scripted upstream")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=create_key(gateway), max_retries=0)
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hello from the scripted upstream"

    assert gateway.exec("id", "-u").stdout.strip() == str(UID)
    refused = gateway.exec("sh", "-c", "echo x > /opt/hatchway/written", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    assert gateway.exec("sh", "-c", "echo x > /etc/hatchway/written", check=False).returncode != 0
    gateway.exec("sh", "-c", "echo x > /var/lib/hatchway/written")  # the volume is the state
    state = gateway.exec("ls", "-a", "/var/lib/hatchway/.hatchway").stdout.split()
    assert "hatchway.db" in state and "master.key" in state
    assert upstream.headers[-1]["authorization"] == "Bearer sk-upstream"


def test_sigterm_drains_the_request_in_flight_and_exits_zero(
    tmp_path: Path, containers: list[Container], volume: str, upstream: ScriptedLLM
) -> None:
    config = write_config(tmp_path, {**base_settings(upstream), "drain_seconds": 30})
    gateway, url, _ = serve(containers, "drain", config, env={}, mounts=[f"{volume}:/var/lib/hatchway"])
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=create_key(gateway), max_retries=0, timeout=120)
    gate = threading.Event()
    upstream.reply("finished during the drain", gate=gate)

    answers: list[Any] = []

    def call() -> None:
        try:
            answers.append(
                client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "slow"}])
            )
        except Exception as exc:  # the assertion below shows it
            answers.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: len(upstream.requests) == 1, timeout=60, message="the request never reached upstream")
    stopped_at = time.monotonic()
    docker("kill", "--signal", "TERM", gateway.name)  # what `docker stop` and Kubernetes send first
    wait_until(
        lambda: "Waiting for connections to close" in gateway.logs() or "Shutting down" in gateway.logs(),
        timeout=30,
        message="the gateway did not start draining",
    )
    with pytest.raises(httpx.HTTPError):  # no new connections while draining
        httpx.get(f"{url}/healthz", timeout=2)
    assert gateway.running()
    gate.set()
    caller.join(timeout=60)
    code = gateway.wait(timeout=60)
    elapsed = time.monotonic() - stopped_at
    assert code == 0, gateway.logs()[-3000:]
    assert elapsed < 30, f"exited {elapsed:.1f} s after SIGTERM: past drain_seconds"
    assert not isinstance(answers[0], Exception), answers[0]
    assert answers[0].choices[0].message.content == "finished during the drain"


def needs_pg_and_redis(test: Any) -> Any:
    for mark in reversed(NEEDS_PG_AND_REDIS):
        test = mark(test)
    return test


@needs_pg_and_redis
def test_two_gateways_and_a_worker_on_postgres_and_redis(
    tmp_path: Path, containers: list[Container], upstream: ScriptedLLM
) -> None:
    prefix = unique_redis_prefix()
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o755)
    (secrets / "master_key").write_text(__import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    (secrets / "db_password").write_text("not-needed-with-trust-auth\n")
    for secret in secrets.iterdir():
        secret.chmod(0o644)
    env = {
        "HATCHWAY_MASTER_KEY_FILE": "/run/secrets/master_key",
        "HATCHWAY_DATABASE_PASSWORD_FILE": "/run/secrets/db_password",
    }
    mounts = [f"{secrets}:/run/secrets:ro"]
    with fresh_pg_database("hatchway_image") as database_url:
        config = write_config(
            tmp_path,
            {
                **base_settings(upstream),
                "database_url": database_url,
                "redis_url": REDIS_URL,
                "redis_prefix": prefix,
                "migrate_on_start": False,
                "background": {"serve_concurrency": 0},
            },
        )
        try:
            config_mount = f"{config}:/etc/hatchway/hatchway.yaml:ro"
            migrate = Container("migrate", ["migrate"], env=env, mounts=[config_mount, *mounts])
            containers.append(migrate)
            assert migrate.wait() == 0, migrate.logs()
            assert "migrated from an empty database" in migrate.logs()

            a, url_a, _ = serve(containers, "a", config, env=env, mounts=mounts)
            _, url_b, _ = serve(containers, "b", config, env=env, mounts=mounts)
            worker_env = {"UPSTREAM_KEY": "sk-upstream", **env}
            worker = Container("worker", ["worker"], env=worker_env, mounts=[config_mount, *mounts])
            containers.append(worker)
            wait_until(lambda: "ready: queue" in worker.logs(), timeout=90, message="the worker to be ready")
            assert httpx.get(f"{url_b}/readyz", timeout=5).json().get("queue_workers", 0) >= 1

            key = create_key(a)
            upstream.reply("answered by the worker")
            queued = httpx.post(
                f"{url_a}/v1/responses",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "gpt-4o", "input": "run me in the background", "background": True},
                timeout=30,
            )
            assert queued.status_code == 200, queued.text
            response_id = queued.json()["id"]

            def done() -> dict[str, Any] | None:
                auth = {"authorization": f"Bearer {key}"}
                body = httpx.get(f"{url_b}/v1/responses/{response_id}", headers=auth, timeout=10).json()
                return body if body["status"] not in ("queued", "in_progress") else None

            final = wait_until(done, timeout=90, message="the background response never finished")
            assert final["status"] == "completed", final
            assert final["output"][-1]["content"][0]["text"] == "answered by the worker"
            assert re.search(r"worker \S+ ready", worker.logs())
        finally:
            for container in containers:
                container.remove()
            purge_redis(REDIS_URL, prefix)
