"""``hatchway demo``: what ``make demo`` runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hatchway.cli.program import app, examples
from hatchway.demo.env import ENV_API_KEY, ENV_BASE_URL, ENV_MODEL


@app.command(
    "demo",
    rich_help_panel="Run",
    epilog=examples(
        "hatchway demo",
        "hatchway demo --keep-running    (then open the printed /ui URL; Ctrl-C stops)",
        f"{ENV_BASE_URL}=http://127.0.0.1:11434/v1 {ENV_MODEL}=llama3.1 hatchway demo    (a local Ollama)",
        f"{ENV_API_KEY}=sk-… {ENV_MODEL}=gpt-4o-mini hatchway demo    (OpenAI)",
    ),
)
def demo(
    keep_running: Annotated[
        bool, typer.Option("--keep-running", help="Leave the gateway up afterwards to explore /ui.")
    ] = False,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir", help="Where the database, master key and hatchway.yaml go (default: a temp dir)."
        ),
    ] = None,
) -> None:
    """Play three stories end to end on loopback: gateway, example MCP servers and a scripted model.

    Research over MCP tools, a transactional operation with confirmation, and delegation to subagents,
    driven by the official openai client; exits non-zero if a story fails. Run from a checkout (it
    starts the servers of examples/).
    """
    from hatchway.demo import run_demo

    raise typer.Exit(run_demo(keep_running=keep_running, state_dir=state_dir))
