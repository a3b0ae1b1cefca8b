"""``python -m hatchway.demo``: start everything, play the three stories, say where to look, clean up.

Exit codes: 0 every story played; 1 a story failed (one line each says why); 2 the demo could not
start; 130 interrupted (Ctrl-C) before the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
from rich.console import Console
from rich.markup import escape

from hatchway.demo import stories, transcript
from hatchway.demo.env import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL
from hatchway.demo.stack import ORG, DemoError, DemoStack, ModelChoice

Story = Callable[[stories.StoryContext], dict[str, Any]]
STORIES: tuple[tuple[str, str, Story], ...] = (
    (
        "Research over MCP tools",
        "Chat Completions, model agent:research: the gateway runs the model ⇄ MCP tool loop itself.",
        stories.research,
    ),
    (
        "A transactional operation with confirmation",
        "Chat Completions, model agent:contas, header hatchway-session: ask → confirm → execute once.",
        stories.operation,
    ),
    (
        "Delegation to subagents in parallel",
        "Responses API, model agent:orchestrator (subagents.enabled): hosted spawn_subagent.",
        stories.delegation,
    ),
)


@dataclass
class StoryResult:
    number: int
    title: str
    reason: str = ""
    """Empty when the story played as it should."""
    facts: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hatchway.demo",
        description="Hatchway end to end on loopback: gateway, example MCP servers and a scripted model, "
        "driven by the official openai client through three stories.",
        epilog=f"Use a real OpenAI-compatible model instead of the scripted one: set {ENV_BASE_URL} "
        f"(default https://api.openai.com/v1), {ENV_API_KEY} and {ENV_MODEL}, e.g. "
        f"{ENV_BASE_URL}=http://127.0.0.1:11434/v1 {ENV_MODEL}=llama3.1 make demo",
    )
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the gateway up afterwards to explore /ui (Ctrl-C stops)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where the database, master key and hatchway.yaml go (default: a new temp dir)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit code."""
    args = parse_args(argv)
    return run_demo(keep_running=args.keep_running, state_dir=args.state_dir)


def run_demo(
    *, keep_running: bool = False, state_dir: Path | None = None, console: Console | None = None
) -> int:
    """Start, play, report; every server is stopped on the way out, Ctrl-C included."""
    with demo_process():
        return _run(keep_running, state_dir, console or Console(highlight=False))


def _run(keep_running: bool, state_dir: Path | None, console: Console) -> int:
    choice = ModelChoice.from_env(os.environ)
    state = state_dir or Path(tempfile.mkdtemp(prefix="hatchway-demo-"))
    started = time.monotonic()
    stack: DemoStack | None = None
    try:
        _banner(console, choice)
        stack = DemoStack(state, choice, console)
        stack.start()
        results = play(stack, console)
        where_to_look(console, stack, results, keep_running)
        code = _summary(console, results, time.monotonic() - started)
        if keep_running:
            _wait_for_ctrl_c(console, stack)
        return code
    except DemoError as exc:
        console.print(f"[bold red]demo failed:[/] {escape(str(exc))}")
        return 2
    except KeyboardInterrupt:
        console.print("\n[yellow]interrupted[/]")
        return 130
    finally:
        if stack is not None:
            with console.status("Stopping the gateway and the servers…"):
                stack.stop()


@contextmanager
def demo_process() -> Iterator[None]:
    """While the demo runs: ``kill`` (SIGTERM) cleans up like Ctrl-C, Ctrl-C stops it even when the
    process was started with SIGINT ignored (a background job of a shell script inherits that, and
    Python then installs no KeyboardInterrupt: ``--keep-running`` ran forever), and the gateway's
    own warnings stay out of the transcript, which reports what failed itself."""
    hatchway_logger = logging.getLogger("hatchway")
    level = hatchway_logger.level
    hatchway_logger.setLevel(logging.ERROR)
    on_main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = {}
    if on_main_thread:
        previous = {number: signal.signal(number, _interrupt) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        hatchway_logger.setLevel(level)


def play(stack: DemoStack, console: Console) -> list[StoryResult]:
    """Play every story (a failed one does not stop the next)."""
    label = "scripted model" if stack.choice.scripted else f"model {stack.choice.model}"
    timeout = 30.0 if stack.choice.scripted else 300.0
    with (
        openai.OpenAI(
            base_url=f"{stack.gateway_url}/v1", api_key=stack.api_key, max_retries=0, timeout=timeout
        ) as client,
        httpx.Client(
            base_url=stack.gateway_url, headers={"authorization": f"Bearer {stack.api_key}"}, timeout=30
        ) as http,
    ):
        ctx = stories.StoryContext(client, http, console, label, stack.contas_backend)
        results = []
        for number, (title, how, story) in enumerate(STORIES, 1):
            transcript.story_header(console, number, title, how)
            result = StoryResult(number, title)
            try:
                result.facts = story(ctx)
            except (stories.StoryFailed, openai.OpenAIError, httpx.HTTPError) as exc:
                result.reason = failure_reason(exc)
                console.print(f"[bold red]✗ story {number} failed:[/] {escape(result.reason)}")
            results.append(result)
        return results


def failure_reason(exc: Exception) -> str:
    """One line: the gateway's error code and message when it sent one."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body.get("error", body), dict) else body
        detail = f"{error.get('code')}: {error.get('message')}" if error.get("message") else str(exc)
        reason = f"HTTP {exc.status_code} {detail}"
    elif isinstance(exc, openai.APIConnectionError):
        reason = f"the gateway did not answer ({exc.__class__.__name__}: {exc})"
    else:
        reason = str(exc) or exc.__class__.__name__
    return " ".join(reason.split())


def where_to_look(console: Console, stack: DemoStack, results: list[StoryResult], keep_running: bool) -> None:
    """Where the stories left their traces; one line each, never wrapped, so they can be copied."""
    hatchway = _hatchway_command()
    operation = next((r.facts["operation_id"] for r in results if "operation_id" in r.facts), "<id>")
    key = stack.api_key
    lines = [
        ("Dashboard", f"{stack.gateway_url}/ui  (sign in with the API key {key})"),
        ("Run log", f"{hatchway} logs --config {stack.config_path} --org {ORG} --has-tool-calls"),
        ("Operation", f'curl -H "Authorization: Bearer {key}" {stack.gateway_url}/v1/operations/{operation}'),
        (
            "State",
            f"{stack.state_dir}  (SQLite, master key, the generated hatchway.yaml; delete it when done)",
        ),
    ]
    if not keep_running:
        lines.insert(
            1, ("", "the gateway stops with the demo: `make demo DEMO_ARGS=--keep-running` keeps it up")
        )
    if stack.choice.scripted:
        lines.append(
            ("Real model", f"{ENV_BASE_URL}=http://127.0.0.1:11434/v1 {ENV_MODEL}=llama3.1 make demo")
        )
    console.print()
    console.rule("[bold]Where to look[/]", align="left")
    for label, text in lines:
        console.print(f"  [bold]{label:<10}[/] {escape(text)}", soft_wrap=True)


def _summary(console: Console, results: list[StoryResult], seconds: float) -> int:
    failed = [r for r in results if r.reason]
    console.print()
    if not failed:
        console.print(f"[bold green]✓ {len(results)} of {len(results)} stories played[/] in {seconds:.1f} s")
        return 0
    for result in failed:
        console.print(
            f"[bold red]demo failed:[/] story {result.number} ({result.title}): {escape(result.reason)}",
            soft_wrap=True,
        )
    return 1


def _banner(console: Console, choice: ModelChoice) -> None:
    console.rule("[bold]Hatchway demo[/]", align="left")
    if choice.scripted:
        console.print(
            "Model: [bold yellow]scripted[/] — a deterministic stand-in for an LLM, not a real model; "
            "its answers are marked \\[scripted]. "
            f"Set {ENV_BASE_URL} / {ENV_API_KEY} / {ENV_MODEL} to use a real OpenAI-compatible model."
        )
    else:
        key = "with" if choice.api_key_set else "without"
        console.print(
            f"Model: [bold]{escape(choice.model)}[/] at {escape(choice.base_url or '')} ({key} an API key) — "
            "a real model: the stories' wording and tool choices will vary."
        )


def _hatchway_command() -> str:
    beside = Path(sys.executable).parent / "hatchway"
    if beside.exists():
        try:
            return str(beside.relative_to(Path.cwd()))
        except ValueError:
            return str(beside)
    return shutil.which("hatchway") or "hatchway"


def _wait_for_ctrl_c(console: Console, stack: DemoStack) -> None:
    try:  # a Ctrl-C as soon as the line is out is the stop it asks for, not an interruption
        console.print(f"\nThe gateway keeps running at {stack.gateway_url} — press Ctrl-C to stop it.")
        while stack.gateway_server is not None and stack.gateway_server.running:
            # Not signal.pause(): a Ctrl-C arriving between the loop's check and the pause itself
            # is handled only at the next signal, so the demo hung (seen on a loaded machine). A
            # sleep is cut short by the signal, or ends within half a second to handle it.
            time.sleep(0.5)
    except KeyboardInterrupt:
        console.print()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
