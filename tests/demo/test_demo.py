"""``make demo`` end to end: ``python -m hatchway.demo`` as a newcomer runs it, in its own process.

The transcript is read as text (Rich prints plain text when not on a terminal), so these tests check
what a person sees: three stories, the per-item table, the delegation tree, where to look.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.paths import ROOT
from tests.support.servers import free_port, wait_until

DEMO_ENV = ("HATCHWAY_DEMO_BASE_URL", "HATCHWAY_DEMO_API_KEY", "HATCHWAY_DEMO_MODEL", "HATCHWAY_DATABASE_URL")
EVENT_DEADLINE = 120.0
"""How long a wait for the demo (its end, its stop, a port closing) may take before the test fails: a
quiet machine needs a few seconds, a busy one many times more; only a demo that hangs misses it."""


def demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DEMO_ENV}
    return {**env, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **extra}


def run_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hatchway.demo", "--state-dir", str(tmp_path / "state")],
        cwd=ROOT,
        env=demo_env(**env),
        capture_output=True,
        text=True,
        timeout=EVENT_DEADLINE,
    )


@pytest.mark.timeout(300)  # the demo and `hatchway logs`, each within EVENT_DEADLINE on a loaded machine
def test_the_demo_plays_three_stories_and_says_where_to_look(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_demo(tmp_path)
    elapsed = time.monotonic() - started
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert elapsed < 60, f"the demo took {elapsed:.1f}s"
    prose = " ".join(out.replace("│", " ").split())  # panels wrap long text

    assert "Model: scripted" in out and "[scripted]" in out
    assert [line.split("·")[0].strip() for line in out.splitlines() if line.startswith("Story ")] == [
        "Story 1",
        "Story 2",
        "Story 3",
    ]
    # 1: research over two MCP tool rounds, answered from the fetched page.
    assert "2 tool rounds and 3 model calls inside one request" in out
    assert "research/search_web" in out and "research/fetch_page" in out
    assert "Streamable HTTP replaces the HTTP+SSE transport" in prose
    # 2: the question, the "sim", and the per-item table of GET /v1/operations/{id}.
    assert "Você confirma o cancelamento de Produto A, Produto B e Produto C?" in prose
    assert re.search(r"Produto A\s*│\s*1001\s*│\s*ok\s*│", out)
    assert re.search(r"Produto B\s*│\s*1002\s*│\s*not_found\s*│", out)
    assert re.search(r"Produto C\s*│\s*1003\s*│\s*ok\s*│", out)
    assert "verdict: PARTIAL_SUCCESS" in out
    assert re.search(
        r"verdict PARTIAL_SUCCESS; the contas server executed it once \(idempotency key = op_", prose
    )
    # 3: a parent and three children, in parallel.
    tree = [line for line in out.splitlines() if re.search(r"resp_\w+ (parent|child) ·", line)]
    assert [("parent" if " parent " in line else "child") for line in tree] == ["parent", *["child"] * 3]
    fan_out = re.search(
        r"3 children ran in parallel: fan-out wall time ([\d.]+) s \(one after another: ([\d.]+) s", prose
    )
    assert fan_out is not None
    wall, one_by_one = map(float, fan_out.groups())
    assert wall < one_by_one  # they overlapped (each child's answer takes 0.5 s)
    # Where to look, and that those lines are true.
    key = re.search(r"sign in with the API key (\S+)\)", out).group(1)
    assert re.search(r"Dashboard\s+http://127\.0\.0\.1:\d+/ui", out)
    logs_line = re.search(r"Run log\s+(\S+) logs --config (\S+) --org demo --has-tool-calls", out)
    assert logs_line is not None and Path(logs_line.group(2)) == tmp_path / "state" / "hatchway.yaml"
    assert key.startswith("hw-") and f"Bearer {key}" in out
    assert "3 of 3 stories played" in out

    logs = subprocess.run(
        [str(ROOT / logs_line.group(1)), "logs", "--config", logs_line.group(2), "--org", "demo", "--json"],
        cwd=tmp_path,
        env=demo_env(),
        capture_output=True,
        text=True,
        timeout=EVENT_DEADLINE,
    )
    assert logs.returncode == 0, logs.stderr
    models = [record["model"] for record in json.loads(logs.stdout)]
    assert models.count("agent:research") == 1 and models.count("agent:orchestrator") == 4


def test_a_failing_story_makes_the_demo_exit_non_zero_with_the_reason(tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    result = run_demo(tmp_path, HATCHWAY_DEMO_BASE_URL=unreachable, HATCHWAY_DEMO_MODEL="llama3.1")
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert f"Model: llama3.1 at {unreachable}" in out and "scripted" not in out.split("Story 1")[0]
    failures = [line for line in out.splitlines() if line.startswith("demo failed:")]
    assert len(failures) == 3
    assert failures[0].startswith(
        "demo failed: story 1 (Research over MCP tools): HTTP 502 upstream_unavailable:"
    )
    assert "Traceback" not in out + result.stderr


@pytest.mark.timeout(300)  # the demo's play and its stop, each within EVENT_DEADLINE on a loaded machine
def test_keep_running_serves_the_dashboard_until_ctrl_c_then_stops_everything(tmp_path: Path) -> None:
    """Started as a shell script's background job would be, with SIGINT ignored (inherited across
    exec: Python then installs no KeyboardInterrupt of its own), Ctrl-C still stops it."""
    demo = [sys.executable, "-m", "hatchway.demo", "--keep-running", "--state-dir", str(tmp_path / "state")]
    command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *demo]
    with subprocess.Popen(
        command, cwd=ROOT, env=demo_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            seen = []
            assert proc.stdout is not None
            for line in proc.stdout:  # at the demo's own pace; the suite's timeout bounds it
                seen.append(line)
                if "press Ctrl-C to stop it" in line:
                    break
            out = "".join(seen)
            gateway = re.search(r"keeps running at (http://127\.0\.0\.1:\d+)", out).group(1)
            assert httpx.get(f"{gateway}/ui/", timeout=EVENT_DEADLINE).status_code == 200

            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=EVENT_DEADLINE)  # it stops every server, in order
            assert proc.returncode == 0, rest
        finally:
            if proc.poll() is None:
                proc.kill()

    # Every server lived in the demo's process (threads), which is gone; its port is closed.
    def refused() -> bool:
        try:
            httpx.get(f"{gateway}/healthz", timeout=1)
        except httpx.TransportError:
            return True
        return False

    wait_until(refused, timeout=EVENT_DEADLINE, message="the gateway's port to close")


def test_run_demo_in_process_leaves_no_thread_behind(tmp_path: Path) -> None:
    """The entry point itself (what ``python -m hatchway.demo`` calls): every server thread is joined."""
    import io
    import threading

    from rich.console import Console

    from hatchway.demo import run_demo as play_demo

    before = set(threading.enumerate())
    transcript = io.StringIO()
    code = play_demo(state_dir=tmp_path / "state", console=Console(file=transcript, width=200))
    assert code == 0, transcript.getvalue()
    assert "3 of 3 stories played" in transcript.getvalue()

    def left() -> list[str]:
        # Rich's spinner thread ends on its own shortly after the last status line; ours are joined.
        return [t.name for t in set(threading.enumerate()) - before if t.is_alive()]

    wait_until(lambda: not left(), timeout=EVENT_DEADLINE, message="every thread the demo started to end")


def test_the_environment_switches_the_model_with_no_other_change(tmp_path: Path) -> None:
    """``HATCHWAY_DEMO_*`` point the gateway at another OpenAI-compatible endpoint (here the scripted
    model, served apart as a stand-in for a real one): the demo starts no model of its own, names the
    one it uses, and sends the key."""
    from hatchway.demo.scripted_model import create_app
    from tests.support.servers import ServerThread

    seen: list[tuple[str, str]] = []
    inner = create_app()

    async def recording(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            seen.append((scope["path"], headers.get(b"authorization", b"").decode()))
        await inner(scope, receive, send)

    with ServerThread(recording) as upstream:
        result = run_demo(
            tmp_path,
            HATCHWAY_DEMO_BASE_URL=f"{upstream.url}/v1",
            HATCHWAY_DEMO_API_KEY="sk-demo-test",
            HATCHWAY_DEMO_MODEL="my-model",
        )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert f"Model: my-model at {upstream.url}/v1 (with an API key)" in out
    assert "Model: scripted" not in out and "scripted model (a deterministic" not in out
    assert "3 of 3 stories played" in out
    assert seen and {auth for _, auth in seen} == {"Bearer sk-demo-test"}
    assert {path for path, _ in seen} == {"/v1/chat/completions"}
    assert "sk-demo-test" not in out  # the key is named, never printed
