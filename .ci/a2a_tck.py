"""The A2A TCK (third_party/a2a-tck) against a published Hatchway agent: its mandatory and
capabilities categories on the JSON-RPC and HTTP+JSON bindings, compared with
.ci/a2a-tck-expected.yaml (docs/a2a.md, "The A2A TCK"). Run by .ci/a2a-tck, which .ci/run calls.

One event loop serves the scripted upstream and a loopback proxy in front of the gateway, and drives
the TCK's pytest processes; the gateway is `hatchway serve` on SQLite in a temporary directory. The proxy is
where the TCK's two address mistakes are answered, outside the TCK: it fetches the card only at the
host's root, and its REST client drops the interface's path (``/message:send`` instead of
``/a2a/<agent>/rest/message:send``). The TCK sends no ``A2A-Version`` header (which A2A reads as
0.3): its own ``A2A_AUTH_HEADERS`` adds one, next to the bearer key of ``A2A_AUTH_TOKEN``.

Exit status 1 when a test fails that the expectation file does not name (or the run cannot start);
an expected failure that now passes is reported, not failed on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml

from hatchway.demo.upstream import Reply, ScriptedUpstream, answer_lifespan
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore

ROOT = Path(__file__).resolve().parents[1]
TCK = ROOT / "third_party" / "a2a-tck"
TCK_PYTHON = ROOT / ".ci" / "tck-venv" / "bin" / "python"
EXPECTED = ROOT / ".ci" / "a2a-tck-expected.yaml"
REPORTS = ROOT / ".ci" / "a2a-tck-reports"  # git-ignored; kept after the run, for a failure's details
AGENT = "helper"
BINDINGS = ("jsonrpc", "rest")
BINDING_NAMES = {"jsonrpc": "JSON-RPC", "rest": "HTTP+JSON"}

# run_tck.py's run_test_category, as the TCK's own runner selects each category (mandatory adds the
# JSON-RPC compliance tests on the JSON-RPC run only).
CATEGORIES = {
    "mandatory": ("tests/mandatory/", "mandatory or mandatory_protocol"),
    "capabilities": ("tests/optional/capabilities/", None),
}


def tck_markers(category: str, binding: str) -> str | None:
    markers = CATEGORIES[category][1]
    if markers and binding == "jsonrpc":
        markers += " or mandatory_jsonrpc"
    return markers


# ---------------------------------------------------------------------------------------------
# The pieces that run: upstream, gateway, proxy


class LoopServer(uvicorn.Server):
    """A uvicorn server in the runner's loop: the runner, not uvicorn, answers SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(app: Any, port: int) -> LoopServer:
    """Serve ``app`` on loopback in this loop; returns once it listens (within 30 s)."""
    server = LoopServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(30):
        while not server.started:  # uvicorn sets a flag, not an event
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError(f"the server on port {port} stopped before it listened")
            await asyncio.sleep(0.02)
    server.task = task  # type: ignore[attr-defined]
    return server


async def stop(server: LoopServer) -> None:
    server.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(server.task, 10)  # type: ignore[attr-defined]


def upstream_app() -> Any:
    """The model behind the agent: answers every request with a short text at once (the TCK only
    needs tasks that complete)."""
    return ScriptedUpstream(lambda _body: Reply("Hello from the Hatchway agent."), model="tck-model")


class RootToAgent:
    """Reverse proxy (raw ASGI, SSE streamed through): the TCK's root-relative paths to the agent's."""

    def __init__(self, gateway: str, agent: str) -> None:
        self.agent = agent
        self.client = httpx.AsyncClient(base_url=gateway, timeout=httpx.Timeout(120.0, connect=10.0))

    def target(self, path: str) -> str:
        if path == "/.well-known/agent-card.json":
            return f"/a2a/{self.agent}{path}"
        if path.startswith(("/message:", "/tasks", "/extendedAgentCard")):
            return f"/a2a/{self.agent}/rest{path}"
        return path

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await answer_lifespan(receive, send)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")]
        request = self.client.build_request(
            scope["method"],
            self.target(scope["path"]),
            params=scope["query_string"].decode("latin-1"),
            headers=headers,
            content=body,
        )
        upstream = await self.client.send(request, stream=True)
        try:
            hop = (b"content-length", b"transfer-encoding", b"connection")
            out = [(k, v) for k, v in upstream.headers.raw if k.lower() not in hop]
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": out})
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await upstream.aclose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def create_key(database_url: str, org_name: str) -> str:
    """Migrate the gateway's database; an ``admin`` key of a new organisation."""
    db = Database(database_url)
    try:
        await db.migrate()
        store = OrgStore(db)
        org = await store.create_org(org_name)
        _, key = await store.create_key(org.id, role=Role.ADMIN)
        return key
    finally:
        await db.close()


async def wait_healthy(url: str, process: asyncio.subprocess.Process, deadline: float) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise RuntimeError(f"hatchway serve exited with {process.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within the deadline")


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, upstream: str, public: str, port: int, bindings: list[str], log: Path
) -> AsyncIterator[dict[str, str]]:
    """``hatchway serve`` with one published agent; yields an API key per binding, each of an
    organisation of its own."""
    database_url = f"sqlite+aiosqlite:///{tmp / 'hatchway.db'}"
    config = {
        "database_url": database_url,
        "master_key_file": str(tmp / "master.key"),
        "public_base_url": public,
        "providers": [{"id": "upstream", "base_url": f"{upstream}/v1", "timeout_seconds": 10}],
        "models": [{"name": "tck", "provider": "upstream", "upstream_model": "tck-model"}],
        "agents": [{"name": AGENT, "model": "tck", "a2a": {"publish": True}}],
        # The TCK's push configs name https://example.com/... (which CI cannot resolve, and the
        # egress check resolves a host to check it) and http://localhost:8888: allowed, so what is
        # tested is the configs' methods; the deliveries fail in the background, as they would.
        "allow_private_mcp_urls": True,
    }
    (tmp / "hatchway.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    keys = {binding: await create_key(database_url, f"tck-{binding}") for binding in bindings}
    args = ["-m", "hatchway", "serve", "--config", str(tmp / "hatchway.yaml"), "--port", str(port)]
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *args, "--log-level", "warning", stdout=out, stderr=out, cwd=tmp
        )
    try:
        await wait_healthy(f"http://127.0.0.1:{port}/healthz", process, time.monotonic() + 60)
        yield keys
    finally:
        await end(process)


async def end(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


# ---------------------------------------------------------------------------------------------
# The TCK's runs and their comparison with the expectation file


@dataclass
class Run:
    """One pytest process of the TCK: a category on a binding, maybe only some of its tests."""

    category: str
    binding: str
    only: list[str] = field(default_factory=list)
    without: list[str] = field(default_factory=list)
    label: str = ""

    @property
    def name(self) -> str:
        return "-".join(filter(None, (self.category, self.binding, self.label)))


def pytest_args(run: Run, sut_url: str, report: Path) -> list[str]:
    path, _ = CATEGORIES[run.category]
    args = ["-m", "pytest", *(run.only or [path]), f"--sut-url={sut_url}", "--test-scope=all"]
    markers = tck_markers(run.category, run.binding)
    if markers:
        args += ["-m", markers]
    args += ["--transport-strategy", "agent_preferred", "--transports", run.binding]
    args += [f"--deselect={test}" for test in run.without]
    # One event loop for every test: the REST client keeps one httpx.AsyncClient for the session, and
    # on pytest-asyncio's default (a loop per test) its second streaming test fails with "Event loop
    # is closed" (the JSON-RPC client opens a client per stream, so one loop changes nothing there).
    args += ["-o", "asyncio_default_test_loop_scope=session"]
    args += ["-o", "asyncio_default_fixture_loop_scope=session"]
    args += ["-q", "--tb=short", "-p", "no:cacheprovider", "--json-report", f"--json-report-file={report}"]
    return args


async def run_tck(run: Run, sut_url: str, key: str, out: Path) -> dict[str, dict[str, Any]]:
    """The outcome of each test of ``run`` (``passed``/``failed``/``skipped``; an error is a failure),
    by test id."""
    report = out / f"{run.name}.json"
    env = {
        **os.environ,
        "A2A_AUTH_TYPE": "bearer",
        "A2A_AUTH_TOKEN": key,
        "A2A_AUTH_HEADERS": json.dumps({"A2A-Version": "1.0"}),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with (out / f"{run.name}.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(TCK_PYTHON), *pytest_args(run, sut_url, report), cwd=TCK, env=env, stdout=log, stderr=log
        )
        try:
            await process.wait()
        finally:
            await end(process)
    for written in (report, out / f"{run.name}.log"):  # kept for reading: never with the key
        if written.exists():
            written.write_text(written.read_text(errors="replace").replace(key, "<key>"))
    if process.returncode not in (0, 1) or not report.exists():
        raise RuntimeError(f"the TCK's pytest ({run.name}) exited {process.returncode}: {out / run.name}.log")
    results = {}
    for test in json.loads(report.read_text())["tests"]:
        outcome = "failed" if test["outcome"] == "error" else test["outcome"]
        message = next((test[s]["crash"]["message"] for s in ("setup", "call") if failed_at(test, s)), "")
        results[test["nodeid"]] = {"outcome": outcome, "message": message}
    return results


def failed_at(test: dict[str, Any], stage: str) -> bool:
    step = test.get(stage) or {}
    return step.get("outcome") in ("failed", "error") and "crash" in step


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "<key>")
    return text


def load_expected() -> dict[tuple[str, str], str]:
    """(binding, test id) -> why it cannot pass."""
    expected = {}
    for entry in yaml.safe_load(EXPECTED.read_text())["expected_failures"]:
        for binding in entry.get("bindings", BINDINGS):
            expected[(binding, entry["test"])] = entry["reason"]
    return expected


def load_alone() -> dict[str, str]:
    """Tests run in a pytest process of their own (test id -> why)."""
    return {e["test"]: e["reason"] for e in yaml.safe_load(EXPECTED.read_text()).get("run_alone", [])}


class Webhook:
    """The TCK's push webhook, a fixed port (localhost:8888) that its capabilities runs listen on in
    turn. A gateway retries a notification it could not deliver, and its sweep announces late what
    it missed: such a notification to one run's task would reach the next run's listener and fail
    its check that it was told of its own task. So a run starts once every config aimed at the
    webhook has been told (delivered, or given up on) — read from the gateway's own table."""

    URL = "http://localhost:8888/%"

    def __init__(self, database: Path) -> None:
        self.database = database
        self.lock = asyncio.Lock()

    def untold(self) -> int:
        with contextlib.closing(sqlite3.connect(f"file:{self.database}?mode=ro", uri=True)) as db:
            query = "SELECT count(*) FROM a2a_push_configs WHERE url LIKE ? AND delivered IS NULL"
            return db.execute(query, (self.URL,)).fetchone()[0]

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        async with self.lock:
            async with asyncio.timeout(120):  # 5 attempts of 10 s at most, backoff in between
                while True:  # another process's table: nothing to wait on but its rows
                    if not await asyncio.to_thread(self.untold):
                        break
                    await asyncio.sleep(0.2)
            yield


async def run_binding(binding: str, sut_url: str, key: str, out: Path, webhook: Webhook) -> dict:
    """The categories of one binding, one after the other; the tests of ``run_alone`` each in a
    pytest process of its own, after the rest of their category."""
    alone = load_alone()
    results: dict[tuple[str, str], dict] = {}
    for category in CATEGORIES:
        path = CATEGORIES[category][0]
        mine = [t for t in alone if t.startswith(path)]
        runs = [Run(category, binding, without=mine)]
        runs += [Run(category, binding, only=[t], label=f"alone{n}") for n, t in enumerate(mine, 1)]
        outcome: dict[str, dict[str, Any]] = {}
        for run in runs:
            async with webhook.turn() if category == "capabilities" else contextlib.nullcontext():
                outcome |= await run_tck(run, sut_url, key, out)
        results[(category, binding)] = outcome
    return results


async def run_all(sut_url: str, keys: dict[str, str], out: Path, webhook: Webhook) -> dict:
    """The bindings side by side, each as an organisation of its own (ListTasks lists the caller's
    organisation's tasks, so neither run sees the other's): 1 min 45 s instead of 3 min 10 s, most
    of it the ListTasks set-ups' 5 s waits for a `working` task."""
    runs = [run_binding(binding, sut_url, key, out, webhook) for binding, key in keys.items()]
    results: dict[tuple[str, str], dict] = {}
    for done in await asyncio.gather(*runs):
        results |= done
    return {(c, b): results[(c, b)] for b in keys for c in CATEGORIES}


def compare(results: dict[tuple[str, str], dict], secrets: list[str]) -> int:
    expected = load_expected()
    head = f"{'category':<14}{'binding':<11}{'passed':>8}{'failed':>8}{'skipped':>9}  {'other':<12}"
    print(f"\n{head}expected to fail")
    unexpected, fixed = [], []
    for (category, binding), tests in results.items():
        counts = Counter(t["outcome"] for t in tests.values())
        other = ", ".join(f"{n} {o}" for o, n in counts.items() if o not in ("passed", "failed", "skipped"))
        mine = {t for (b, t) in expected if b == binding and t in tests}
        print(
            f"{category:<14}{BINDING_NAMES[binding]:<11}{counts['passed']:>8}{counts['failed']:>8}"
            f"{counts['skipped']:>9}  {other or '-':<12}{len(mine)}"
        )
        for test, result in tests.items():
            if result["outcome"] == "failed" and (binding, test) not in expected:
                unexpected.append((binding, test, redact(result["message"], secrets)))
            elif result["outcome"] != "failed" and test in mine:
                fixed.append((binding, test, result["outcome"]))
    for binding, test, outcome in fixed:
        print(f"expected to fail, now {outcome} ({BINDING_NAMES[binding]}): {test}")
    for binding, test, message in unexpected:
        print(f"UNEXPECTED FAILURE ({BINDING_NAMES[binding]}): {test}\n    {message[:400]}")
    if unexpected:
        print(f"{len(unexpected)} unexpected failure(s): fix them, or name them in {EXPECTED.name} with why")
        return 1
    print("no unexpected failure")
    return 0


async def main_async(args: argparse.Namespace, tmp: Path) -> int:
    upstream_port, gateway_port, proxy_port = free_port(), free_port(), free_port()
    # localhost, not 127.0.0.1: the TCK's card check flags 127.0.0.1 in a card as an internal URL and
    # lets localhost pass (its FIXME "allow localhost").
    public = f"http://localhost:{proxy_port}"
    upstream = await serve(upstream_app(), upstream_port)
    proxy_app = RootToAgent(f"http://127.0.0.1:{gateway_port}", AGENT)
    proxy = await serve(proxy_app, proxy_port)
    try:
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        log = args.reports / "gateway.log"
        async with gateway(tmp, upstream_url, public, gateway_port, args.bindings, log) as keys:
            print(f"gateway up; the TCK's reports and logs go to {args.reports}", flush=True)
            webhook = Webhook(tmp / "hatchway.db")
            results = await run_all(f"{public}/a2a/{AGENT}", keys, args.reports, webhook)
            return compare(results, list(keys.values()))
    finally:
        await proxy_app.client.aclose()
        await stop(proxy)
        await stop(upstream)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bindings", nargs="+", choices=BINDINGS, default=list(BINDINGS))
    where = "where the TCK's JSON reports and logs go (its *.json and *.log removed first)"
    parser.add_argument("--reports", type=Path, default=REPORTS, help=where)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    args = parser.parse_args()
    if not TCK_PYTHON.exists():
        print(f"{TCK_PYTHON} is missing: .ci/run makes it from .ci/tck-requirements.txt", file=sys.stderr)
        return 1
    # The proxy and the upstream write to clients that hung up mid-stream (the TCK closes streams
    # early); asyncio's "socket.send() raised exception." about it is noise here.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    started = time.monotonic()
    args.reports = args.reports.resolve()
    args.reports.mkdir(parents=True, exist_ok=True)
    for old in [*args.reports.glob("*.json"), *args.reports.glob("*.log")]:
        old.unlink()  # a previous run's reports would mislead
    with tempfile.TemporaryDirectory(prefix="a2a-tck-") as tmp:

        async def bounded() -> int:
            # SIGTERM (from `timeout` or CI) unwinds like the deadline: every process is ended.
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            async with asyncio.timeout(args.timeout):
                return await main_async(args, Path(tmp))

        try:
            status = asyncio.run(bounded())
        except TimeoutError:
            print(f"the TCK run took over {args.timeout:.0f} s: stopped", file=sys.stderr)
            status = 1
        except asyncio.CancelledError:
            print("the TCK run was stopped (SIGTERM)", file=sys.stderr)
            status = 1
    print(f"A2A TCK: {time.monotonic() - started:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
