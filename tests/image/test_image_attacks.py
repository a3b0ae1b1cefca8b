"""The container image attacked from the operator's side (issue 44 review): the ways a platform runs
an image that tests/image/test_image.py does not — another uid, every capability dropped, a proxy in
the environment, a request that outlives the drain, a second SIGTERM — and what a build context may
carry into it. Skipped without ``HATCHWAY_TEST_IMAGE``, like test_image.py (``make image-test``).
"""

from __future__ import annotations

import json
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

from tests.image.test_image import IMAGE, base_settings, docker, write_config
from tests.support.paths import ROOT
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port, wait_until

pytestmark = pytest.mark.skipif(
    not IMAGE, reason="the image tests run in .ci/image-test (make image-test), which builds the image"
)

HARDENED = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
# The image's HEALTHCHECK command, run every second instead of every 10 s.
FAST_HEALTH = ["--health-interval", "1s", "--health-start-period", "0s", "--health-retries", "2"]


class Run:
    """A detached container of the image on the host's network, with any ``docker run`` options."""

    def __init__(self, options: list[str], args: list[str]) -> None:
        self.name = f"hatchway-attack-{uuid.uuid4().hex[:8]}"
        docker("run", "-d", "--network", "host", "--name", self.name, *options, IMAGE, *args)

    def logs(self) -> str:
        done = docker("logs", self.name, check=False)
        return done.stdout + done.stderr

    def running(self) -> bool:
        return docker("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip() == "true"

    def health(self) -> dict[str, Any]:
        return json.loads(docker("inspect", "--format", "{{json .State.Health}}", self.name).stdout)

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.name, *args, check=check)

    def remove(self) -> None:
        docker("rm", "-f", "-v", self.name, check=False)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        run.remove()


@pytest.fixture
def upstream() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM()
    with llm.server:
        yield llm


def gateway(runs: list[Run], config: Path, options: list[str], *, port: int | None = None) -> tuple[Run, str]:
    port = port or free_port()
    run = Run(
        ["-e", "UPSTREAM_KEY=sk-upstream", "-v", f"{config}:/etc/hatchway/hatchway.yaml:ro", *options],
        ["serve", "--host", "127.0.0.1", "--port", str(port)],
    )
    runs.append(run)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if not run.running():
            raise AssertionError(f"the gateway exited:\n{run.logs()[-3000:]}")
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout=90, interval=0.1, message="the gateway never became ready")
    return run, url


def settled_health(run: Run, timeout: float = 60) -> str:
    def settled() -> str | None:
        status = run.health()["Status"]
        return status if status != "starting" else None

    return wait_until(settled, timeout=timeout, interval=0.5, message="the healthcheck never settled")


def test_the_healthcheck_ignores_the_proxy_the_environment_names(
    tmp_path: Path, runs: list[Run], upstream: ScriptedLLM
) -> None:
    """Behind a corporate proxy the operator sets ``HTTP_PROXY``/``HTTPS_PROXY`` for the upstream calls
    (docs/deploy.md has a section on such networks). The HEALTHCHECK's ``urlopen`` honoured them and
    asked the proxy for ``http://127.0.0.1:8080/readyz``: a serving gateway was reported unhealthy,
    and Compose's nginx (``depends_on: service_healthy``) never started."""
    config = write_config(tmp_path, base_settings(upstream))
    port = free_port()
    proxy = "http://127.0.0.1:9"  # nothing listens: a request sent to the proxy fails
    run, _ = gateway(
        runs,
        config,
        [
            *HARDENED,
            *FAST_HEALTH,
            "-e", f"HTTP_PROXY={proxy}", "-e", f"http_proxy={proxy}", "-e", f"HTTPS_PROXY={proxy}",
            "-e", f"HATCHWAY_HEALTHCHECK_URL=http://127.0.0.1:{port}/readyz",
        ],
        port=port,
    )  # fmt: skip
    status = settled_health(run)
    assert status == "healthy", json.dumps(run.health()["Log"][-2:], indent=1)


def test_runs_under_an_arbitrary_uid_in_the_root_group_with_every_capability_dropped(
    tmp_path: Path, runs: list[Run], upstream: ScriptedLLM
) -> None:
    """OpenShift's restricted SCC (and ``docker run --user 12345``) run the image as a uid of the
    platform's choosing in group 0, with no capabilities. The state directory was 10001:10001 mode
    0700, so such a run could not create its database and said "the database could not be reached
    (unable to open database file)"."""
    volume = f"hatchway-attack-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", volume)
    try:
        config = write_config(tmp_path, base_settings(upstream))
        options = [*HARDENED, "--user", "12345:0", "-v", f"{volume}:/var/lib/hatchway"]
        run, url = gateway(runs, config, options)
        assert run.exec("id", "-u").stdout.strip() == "12345"
        org = run.exec("hatchway", "orgs", "create", "acme")
        assert org.returncode == 0, org.stderr
        key = run.exec("hatchway", "keys", "create", "--org", "acme").stdout.strip()
        upstream.reply("served as uid 12345")
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "served as uid 12345"
        # Still nothing writable outside the volume and /tmp.
        assert run.exec("sh", "-c", "echo x > /etc/hatchway/x", check=False).returncode != 0
        assert run.exec("sh", "-c", "echo x > /opt/hatchway/x", check=False).returncode != 0
    finally:
        for run in runs:
            run.remove()
        docker("volume", "rm", "-f", volume, check=False)


@pytest.mark.parametrize("second_sigterm", [False, True], ids=["one-sigterm", "two-sigterms"])
def test_a_request_past_drain_seconds_is_cut_and_the_container_exits_zero_in_time(
    tmp_path: Path, runs: list[Run], upstream: ScriptedLLM, second_sigterm: bool
) -> None:
    """docs/deploy.md, "The drain": past ``drain_seconds`` the gateway closes what is left and exits
    0 — under tini, with a second SIGTERM (an impatient operator, a runtime that repeats it) changing
    neither the code nor the bound."""
    config = write_config(tmp_path, {**base_settings(upstream), "drain_seconds": 2})
    run, url = gateway(runs, config, HARDENED)
    run.exec("hatchway", "orgs", "create", "acme")
    key = run.exec("hatchway", "keys", "create", "--org", "acme").stdout.strip()
    never = threading.Event()
    upstream.reply("never sent", gate=never)
    answers: list[Any] = []

    def call() -> None:
        try:
            answers.append(
                httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hang"}]},
                    headers={"authorization": f"Bearer {key}"},
                    timeout=60,
                )
            )
        except httpx.HTTPError as exc:
            answers.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        wait_until(lambda: len(upstream.requests) == 1, timeout=30, message="the request upstream")
        stopped = time.monotonic()
        docker("kill", "--signal", "TERM", run.name)
        if second_sigterm:
            time.sleep(0.5)
            docker("kill", "--signal", "TERM", run.name, check=False)
        code = int(docker("wait", run.name, timeout=60).stdout.strip())
        elapsed = time.monotonic() - stopped
    finally:
        never.set()
        caller.join(timeout=60)
    assert code == 0, run.logs()[-3000:]
    assert elapsed < 2 + 5, f"exited {elapsed:.1f} s after SIGTERM with drain_seconds 2"
    assert answers and (isinstance(answers[0], Exception) or answers[0].status_code >= 500), answers


def test_state_left_in_the_checkout_stays_out_of_the_build_context(tmp_path: Path) -> None:
    """A gateway run from inside the checkout leaves its state there (``./.hatchway/master.key``,
    ``*.db``): git ignores it, but the build stage has no .gitignore, so hatchling put what lay
    under src/hatchway/ into the wheel, and the wheel into the image. The build context (.dockerignore)
    must leave such files out. Checked with the repository's .dockerignore over a small tree."""
    context = tmp_path / "context"
    package = context / "src" / "hatchway"
    (package / ".hatchway").mkdir(parents=True)
    (package / ".hatchway" / "master.key").write_text("a master key\n")
    (package / "hatchway.db").write_text("a database\n")
    (package / "hatchway.db-wal").write_text("its log\n")
    (package / "__init__.py").write_text("")
    (context / ".dockerignore").write_text((ROOT / ".dockerignore").read_text())
    # An image of the context's files only, on the image under test (it has ls and find).
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY src/ /context/src/\n")
    tag = f"hatchway-attack-context:{uuid.uuid4().hex[:8]}"
    docker("build", "-q", "-t", tag, str(context), timeout=300)
    try:
        listing = docker("run", "--rm", "--entrypoint", "find", tag, "/context", "-type", "f").stdout.split()
    finally:
        docker("rmi", "-f", tag, check=False)
    assert "/context/src/hatchway/__init__.py" in listing, listing
    assert [path for path in listing if not path.endswith("__init__.py")] == [], listing
