"""How the demo's transcript looks: who said what, a run's steps, an operation's items, a tree."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.tree import Tree

_SPEAKER_STYLE = {"user": "bold cyan", "hatchway": "bold magenta"}


def story_header(console: Console, number: int, title: str, how: str) -> None:
    console.print()
    console.rule(f"[bold]Story {number} · {title}[/]", align="left")
    console.print(f"[dim]{escape(how)}[/]", highlight=False)


def say(console: Console, speaker: str, text: str, *, note: str = "") -> None:
    """One turn of the conversation: ``user``, ``hatchway`` or the model's label."""
    style = _SPEAKER_STYLE.get(speaker, "bold green")
    suffix = f" [dim]({escape(note)})[/]" if note else ""
    console.print(f"[{style}]{escape(speaker)}[/]{suffix}", highlight=False)
    console.print(Panel(escape(text), expand=False, border_style="dim"), highlight=False)


def fact(console: Console, text: str) -> None:
    console.print(f"  [green]•[/] {text}", highlight=False)


def steps_table(steps: list[dict[str, Any]]) -> Table:
    """A run's steps from the request log: each model call and each tool call, by round."""
    table = Table("round", "step", "detail", "ms", title="What ran inside the gateway (GET /v1/logs/{id})")
    for step in steps:
        if step.get("type") == "model_call":
            calls = step.get("tool_calls") or []
            detail = "→ calls " + ", ".join(calls) if calls else "→ answers"
            table.add_row(str(step.get("round")), "model", detail, f"{step.get('duration_ms', 0):.0f}")
        elif step.get("type") == "tool_call":
            where = (
                f"{step.get('server')}/{step.get('tool')}" if step.get("server") else str(step.get("tool"))
            )
            detail = f"{where} {_short(str(step.get('arguments', '')), 60)} → {step.get('outcome')}"
            table.add_row(
                str(step.get("round")), "tool (MCP)", escape(detail), f"{step.get('duration_ms', 0):.0f}"
            )
    return table


def items_table(operation: dict[str, Any]) -> Table:
    """An operation's per-item outcomes (GET /v1/operations/{id})."""
    verdict = (operation.get("verdict") or {}).get("status", "-")
    table = Table("item", "id", "outcome", title="GET /v1/operations/{id}", caption=f"verdict: {verdict}")
    for item in operation.get("items") or []:
        ok = item.get("success", item.get("ok"))
        outcome = "[green]ok[/]" if ok else f"[red]{escape(str(item.get('error') or 'failed'))}[/]"
        table.add_row(escape(str(item.get("name"))), escape(str(item.get("id", "-"))), outcome)
    return table


def delegation_tree(
    parent: dict[str, Any], children: list[dict[str, Any]], seconds: dict[str, float]
) -> Tree:
    """The parent response and its subagent children (GET /v1/responses?parent_response_id=…)."""
    tree = Tree(
        f"[bold]{parent['id']}[/] parent · {escape(str(parent.get('model')))} · {parent.get('status')}",
        highlight=False,
    )
    for child in children:
        took = f" · {seconds[child['id']]:.2f} s" if child["id"] in seconds else ""
        text = _short(str(child.get("output_text") or "").removeprefix("[scripted]").strip(), 70)
        tree.add(
            f"{child['id']} child · {child.get('status')}{took} · [dim]{escape(text)}[/]", highlight=False
        )
    return tree


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
