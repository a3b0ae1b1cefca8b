"""What the demo's scripted model says: a deterministic decision from each request's last messages.

It knows the demo's three stories and nothing else, and it signs every text it writes with
``[scripted]`` so nobody mistakes it for an LLM:

- **research** (the request offers ``…search_web``/``…fetch_page``): no tool result yet → search for
  the user's question; after the search → fetch the first result; after the page → answer with the
  page's first two sentences and its URL (two tool rounds);
- **operation** (it offers ``cancelar_vas_avulso``): "cancele X, Y e Z" → one call with
  ``subject="X, Y e Z"``; after Hatchway's per-item summary → one line per item and the verdict;
- **delegation** (it offers ``spawn_subagent``): "…: a, b, c" → three ``spawn_subagent`` calls in one
  round; after their results → one line per subagent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

LABEL = "[scripted]"
RESEARCH_ANSWER_SECONDS = 0.5
"""A research answer takes this long, so three subagents in parallel visibly overlap."""
CHILD_INSTRUCTIONS = (
    "You are a research subagent. Search with search_web, read the best page with fetch_page, "
    "then answer in at most two sentences and cite the page's URL."
)

_CANCEL = re.compile(r"\bcancel(?:e|ar)\s+(?:o |os |a |as )?(.+)", re.IGNORECASE)
_TOPICS = re.compile(r"\s*(?:,|;|\band\b|\be\b)\s*", re.IGNORECASE)


@dataclass
class Turn:
    """One scripted answer: text, or tool calls ``(name, arguments)``, after ``delay`` seconds."""

    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    delay: float = 0.0


def decide(body: dict[str, Any]) -> Turn:
    """The answer to one Chat Completions request body."""
    messages = body.get("messages") or []
    tools = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    question = _text(messages[last_user]) if last_user >= 0 else ""
    results = [_parsed(m) for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    if "spawn_subagent" in tools:
        return _delegate(question, results)
    search, fetch = _tool(tools, "search_web"), _tool(tools, "fetch_page")
    if search and fetch:
        return _research(question, results, search, fetch)
    if "cancelar_vas_avulso" in tools:
        return _operation(messages, question)
    return Turn(
        f"{LABEL} Hello! I am Hatchway's scripted model, not an LLM: I only play the demo's stories "
        "(agent:research, agent:contas, agent:orchestrator). Point providers[0].base_url at a real "
        "OpenAI-compatible model for anything else."
    )


def _research(question: str, results: list[Any], search: str, fetch: str) -> Turn:
    if not results:
        return Turn(tool_calls=[(search, {"query": question})])
    last = results[-1]
    if isinstance(last, dict) and isinstance(last.get("results"), list):
        if not last["results"]:
            return Turn(f"{LABEL} The search found nothing about that.")
        return Turn(tool_calls=[(fetch, {"url": last["results"][0]["url"]})])
    if isinstance(last, dict) and "text" in last:
        sentences = str(last["text"]).split(". ")
        answer = ". ".join(sentences[:2]).rstrip(".") + "."
        return Turn(f"{LABEL} {answer} (source: {last.get('url')})", delay=RESEARCH_ANSWER_SECONDS)
    return Turn(f"{LABEL} The research tools failed: {str(last)[:200]}")


def _operation(messages: list[dict[str, Any]], question: str) -> Turn:
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Turn(f"{LABEL} {_report(_parsed(last))}")
    match = _CANCEL.search(question)
    if last.get("role") == "user" and match:
        return Turn(tool_calls=[("cancelar_vas_avulso", {"subject": match.group(1).strip(" .!")})])
    return Turn(f"{LABEL} Posso ajudar em algo mais?")


def _report(summary: Any) -> str:
    if not isinstance(summary, dict):
        return str(summary)
    items = summary.get("items") or []
    if not items:
        error = summary.get("error")
        return f"Não executado: {error.get('message')}" if isinstance(error, dict) else str(summary)
    parts = [
        f"{i.get('name')}: cancelado" if i.get("success") else f"{i.get('name')}: falhou ({i.get('error')})"
        for i in items
    ]
    return f"{summary.get('verdict')} — " + "; ".join(parts) + "."


def _delegate(question: str, results: list[Any]) -> Turn:
    if not results:
        _, _, listed = question.rpartition(":")
        topics = [t.strip(" .") for t in _TOPICS.split(listed) if t.strip(" .")][:3]
        calls = [
            ("spawn_subagent", {"task": f"MCP {topic}", "instructions": CHILD_INSTRUCTIONS})
            for topic in topics
        ]
        return Turn(tool_calls=calls) if calls else Turn(f"{LABEL} Name the topics after a colon.")
    lines = [f"{LABEL} {len(results)} subagents reported back:"]
    for result in results:
        if isinstance(result, dict) and result.get("ok"):
            lines.append(f"- {_first_sentence(str(result.get('output_text', '')))}")
        else:
            lines.append(f"- failed: {result.get('message') if isinstance(result, dict) else result}")
    return Turn("\n".join(lines))


def _first_sentence(answer: str) -> str:
    """``[scripted] A. B. (source: U)`` → ``A. (U)``."""
    text, _, source = answer.removeprefix(LABEL).strip().partition(" (source: ")
    first = text.split(". ")[0].rstrip(".") + "."
    return f"{first} ({source}" if source else first


def _tool(tools: list[str], suffix: str) -> str | None:
    return next((t for t in tools if t == suffix or t.endswith(f"__{suffix}")), None)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _parsed(message: dict[str, Any]) -> Any:
    text = _text(message)
    try:
        return json.loads(text)
    except ValueError:
        return text
