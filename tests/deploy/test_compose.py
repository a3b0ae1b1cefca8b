"""deploy/compose.yaml: Debian's docker-compose (1.29) accepts it, the resolved file has what the
image's contract asks (uid 10001, read-only root, no capabilities, secrets as files, the provider key
among them, migrations once before the gateways), and its hatchway.yaml and nginx config are valid
and agree with it.

``docker-compose config`` runs on a copy in a temporary directory, with dummy secret files: nothing
is written into the checkout's deploy/secrets. What this does not test: starting the stack (no
registry here to pull postgres, redis and nginx from). Skips when docker-compose is missing
(``apt-get install docker-compose``), fails instead when ``HATCHWAY_REQUIRE_NODE_TOOLS`` is set (CI);
the nginx part skips when nginx is missing, like tests/deploy/test_nginx.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from hatchway import __version__
from hatchway.config.settings import load_settings
from tests.support.paths import ROOT
from tests.support.servers import free_port

DEPLOY = ROOT / "deploy"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
HATCHWAY_SERVICES = ("gateway1", "gateway2", "worker", "migrate")
GATEWAYS = ("gateway1", "gateway2")
SECRETS = {
    "master_key": "master_key",
    "postgres_password": "postgres_password",
    "openai_api_key": "openai_api_key",
}
"""Compose secret name → the file under deploy/secrets/ (and /run/secrets/<name> in the container)."""
PROVIDER_SECRETS = {"openai_api_key"}
"""The secrets only the gateways and the worker get: `migrate` calls no provider."""
ENV_LEAKS = (
    "HATCHWAY_DATABASE_URL",
    "HATCHWAY_REDIS_URL",
    "HATCHWAY_MASTER_KEY",
    "HATCHWAY_DATABASE_PASSWORD",
    "OPENAI_API_KEY",
)
"""Secrets (or settings carrying one) that must reach the containers as ``NAME_FILE``, never ``NAME``."""


def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        reason = "docker-compose is not installed (apt-get install docker-compose)"
        if os.environ.get("HATCHWAY_REQUIRE_NODE_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def compose_copy(root: Path) -> Path:
    """deploy/compose.yaml and deploy/compose/ under ``root``/deploy with dummy secret files (as
    deploy/secrets/README.md has them made); returns the copied compose.yaml."""
    deploy = root / "deploy"
    (deploy / "secrets").mkdir(parents=True)
    shutil.copy(DEPLOY / "compose.yaml", deploy / "compose.yaml")
    shutil.copytree(DEPLOY / "compose", deploy / "compose")
    (deploy / "secrets" / "master_key").write_text("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n")
    (deploy / "secrets" / "postgres_password").write_text("not-a-real-password\n")
    (deploy / "secrets" / "openai_api_key").write_text("sk-not-a-real-key\n")
    return deploy / "compose.yaml"


def compose_config(compose_file: Path, **env: str) -> dict[str, Any]:
    """``docker-compose -f compose_file config``, asserted to pass; the resolved file."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "HATCHWAY_"))}
    checked = subprocess.run(
        [docker_compose(), "-f", str(compose_file), "config"],
        cwd=compose_file.parent.parent,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    return yaml.safe_load(checked.stdout)


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compose_copy(tmp_path_factory.mktemp("compose"))


@pytest.fixture(scope="module")
def resolved(copied: Path) -> dict[str, Any]:
    return compose_config(copied)


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """deploy/compose/hatchway.yaml as the containers load it: the password from its _FILE."""
    for name in ENV_LEAKS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    password = tmp_path / "postgres_password"
    password.write_text("s3cret-from-a-file\n")
    monkeypatch.setenv("HATCHWAY_DATABASE_PASSWORD_FILE", str(password))
    return load_settings(DEPLOY / "compose" / "hatchway.yaml")


def seconds(duration: str) -> float:
    """A compose duration as the resolved file writes it (``45s``, ``1m30s``)."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_the_hatchway_services_run_the_image_as_the_contract_says(copied: Path, resolved: dict) -> None:
    services = resolved["services"]
    assert set(services) == {*HATCHWAY_SERVICES, "postgres", "redis", "nginx"}
    for name in HATCHWAY_SERVICES:
        service = services[name]
        assert service["image"] == f"hatchway:{__version__}", name
        assert service["build"] == {
            "context": str(copied.parent.parent),  # `..`: the copy's root here, the checkout's really
            "dockerfile": "Dockerfile",
            "args": {"VERSION": __version__},  # the Dockerfile refuses a VERSION not the package's
        }, name
        assert service["user"] == "10001:10001", name
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert "/tmp" in service["tmpfs"], name
        assert f"{copied.parent}/compose/hatchway.yaml:/etc/hatchway/hatchway.yaml:ro" in service["volumes"]
        assert "ports" not in service, name
    assert services["migrate"]["command"] == ["migrate"]
    assert services["worker"]["command"] == ["worker"]
    for name in GATEWAYS:
        assert services[name]["command"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert (ROOT / "Dockerfile").is_file()  # the build context `..` is the checkout's root


def test_the_image_tag_follows_hatchway_version(copied: Path) -> None:
    services = compose_config(copied, HATCHWAY_VERSION="9.9.9")["services"]

    assert {services[name]["image"] for name in HATCHWAY_SERVICES} == {"hatchway:9.9.9"}
    assert {services[name]["build"]["args"]["VERSION"] for name in HATCHWAY_SERVICES} == {"9.9.9"}


def test_secrets_are_files(copied: Path, resolved: dict) -> None:
    secrets_dir = copied.parent / "secrets"
    assert resolved["secrets"] == {name: {"file": str(secrets_dir / f)} for name, f in SECRETS.items()}
    services = resolved["services"]
    for name in HATCHWAY_SERVICES:
        service = services[name]
        environment = service["environment"]
        expected = set(SECRETS) - PROVIDER_SECRETS if name == "migrate" else set(SECRETS)
        assert {s["source"] for s in service["secrets"]} == expected, name
        assert environment["HATCHWAY_MASTER_KEY_FILE"] == "/run/secrets/master_key", name
        assert environment["HATCHWAY_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password", name
        assert not set(ENV_LEAKS) & set(environment), name  # files only: `docker inspect` shows these
        assert "env_file" not in service, name
    for name in (*GATEWAYS, "worker"):  # the provider key, a file too
        assert services[name]["environment"]["OPENAI_API_KEY_FILE"] == "/run/secrets/openai_api_key", name
    assert "OPENAI_API_KEY_FILE" not in services["migrate"]["environment"]  # calls no provider
    postgres = services["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    assert [s["source"] for s in postgres["secrets"]] == ["postgres_password"]


def test_the_secret_files_stay_out_of_git() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git is not installed, or this is not a git checkout")

    def ignored(path: str) -> bool:
        checked = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path], timeout=30)
        assert checked.returncode in (0, 1)
        return checked.returncode == 0

    assert all(ignored(f"deploy/secrets/{f}") for f in SECRETS.values())
    assert not ignored("deploy/secrets/README.md")
    assert not ignored("deploy/secrets/.gitignore")
    readme = (DEPLOY / "secrets" / "README.md").read_text()
    assert all(f"> deploy/secrets/{f}" in readme for f in SECRETS.values())


def test_migrations_run_once_before_the_gateways_and_the_worker(resolved: dict) -> None:
    services = resolved["services"]
    for name in (*GATEWAYS, "worker"):
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["redis"] == {"condition": "service_healthy"}, name
    migrate = services["migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    assert "ping" in services["redis"]["healthcheck"]["test"]
    # nothing listens on 8080 in these two: the image's HEALTHCHECK (/readyz) is off for them
    assert migrate["healthcheck"] == services["worker"]["healthcheck"] == {"test": ["NONE"]}


def test_nginx_is_the_only_published_port(resolved: dict) -> None:
    published = {name: s["ports"] for name, s in resolved["services"].items() if s.get("ports")}

    assert published == {"nginx": ["127.0.0.1:8080:8080/tcp"]}
    nginx = resolved["services"]["nginx"]
    assert nginx["image"].startswith("nginx:1.27")
    assert nginx["depends_on"] == {g: {"condition": "service_healthy"} for g in GATEWAYS}
    assert any(v.endswith("/compose/nginx.conf:/etc/nginx/conf.d/default.conf:ro") for v in nginx["volumes"])


def test_stateful_services_keep_their_data_on_named_volumes(resolved: dict) -> None:
    services = resolved["services"]
    assert "postgres-data:/var/lib/postgresql/data:rw" in services["postgres"]["volumes"]
    for name in (*GATEWAYS, "worker"):  # each its own run-record spool
        assert f"{name}-state:/var/lib/hatchway:rw" in services[name]["volumes"], name
    assert set(resolved["volumes"]) == {"postgres-data", *(f"{n}-state" for n in (*GATEWAYS, "worker"))}


def test_the_compose_hatchway_yaml_is_valid_and_agrees_with_compose(resolved: dict, settings) -> None:
    services = resolved["services"]
    database = make_url(settings.database_url)
    postgres = services["postgres"]["environment"]

    assert (
        database.drivername == "postgresql+asyncpg" and database.host == "postgres" and database.port == 5432
    )
    assert (database.username, database.database) == (postgres["POSTGRES_USER"], postgres["POSTGRES_DB"])
    assert database.password == "s3cret-from-a-file"  # from HATCHWAY_DATABASE_PASSWORD_FILE…
    in_the_file = yaml.safe_load((DEPLOY / "compose" / "hatchway.yaml").read_text())["database_url"]
    assert make_url(in_the_file).password is None  # …never written in hatchway.yaml
    assert settings.redis_url == "redis://redis:6379/0" and "redis" in services
    assert settings.migrate_on_start is False
    assert settings.background.serve_concurrency == 0
    assert settings.master_key_file == "/run/secrets/master_key"
    assert settings.run_records.spool_dir is not None
    assert settings.run_records.spool_dir.startswith("/var/lib/hatchway/")  # the writable volume
    assert [p.api_key for p in settings.providers] == ["env:OPENAI_API_KEY"]
    for provider in settings.providers:  # each env:NAME as NAME_FILE, a secret the service mounts
        variable = f"{provider.api_key.removeprefix('env:')}_FILE"
        for name in (*GATEWAYS, "worker"):
            path = services[name]["environment"][variable]
            assert path.startswith("/run/secrets/"), (name, variable)
            assert path.removeprefix("/run/secrets/") in {s["source"] for s in services[name]["secrets"]}
    for name in (*GATEWAYS, "worker"):  # SIGTERM: Docker waits longer than the drain and the grace
        grace = seconds(services[name]["stop_grace_period"])
        assert grace > settings.drain_seconds and grace > settings.background.shutdown_grace_seconds, name


def test_the_compose_nginx_config_matches_deploy_nginx() -> None:
    """The same directives as deploy/nginx/hatchway.conf but for the upstream servers and listen."""
    compose = (DEPLOY / "compose" / "nginx.conf").read_text()
    shipped = (DEPLOY / "nginx" / "hatchway.conf").read_text()

    def directives(text: str) -> list[str]:
        lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
        return [line for line in lines if line and not line.startswith(("server ", "listen "))]

    assert directives(compose) == directives(shipped)
    assert re.findall(r"^\s*server (\S+) ", compose, flags=re.M) == [f"{g}:8080" for g in GATEWAYS]
    assert re.findall(r"^\s*listen (\S+);", compose, flags=re.M) == ["8080"]


@pytest.mark.skipif(not os.path.exists(NGINX), reason="nginx not installed (apt-get install nginx-light)")
def test_nginx_accepts_the_compose_config(tmp_path: Path) -> None:
    """`nginx -t` on deploy/compose/nginx.conf inside deploy/nginx/nginx.conf. The service names
    resolve only in the Compose network (nginx resolves upstream names at load), so they become
    127.0.0.1, and the listen port a free one; nothing else changes."""
    snippet = (DEPLOY / "compose" / "nginx.conf").read_text()
    for gateway in GATEWAYS:
        snippet = snippet.replace(f"server {gateway}:8080 ", f"server 127.0.0.1:{free_port()} ")
    snippet = snippet.replace("listen 8080;", f"listen 127.0.0.1:{free_port()};")
    conf = tmp_path / "nginx"
    conf.mkdir()
    (conf / "hatchway.conf").write_text(snippet)
    shutil.copy(DEPLOY / "nginx" / "nginx.conf", conf / "nginx.conf")
    run = tmp_path / "run"
    run.mkdir()

    checked = subprocess.run(
        [NGINX, "-t", "-p", str(run), "-c", str(conf / "nginx.conf"), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr
