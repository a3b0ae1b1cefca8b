"""Classify a primary tool's result into SUCCESS / PARTIAL_SUCCESS / FAILED from its items.

Where the items are read, in order:

1. ``workflow.output[<primary tool>].results`` (workflow-backed tools);
2. ``results`` at the top level;
3. neither: the outer ``ok`` / ``success`` / ``isError`` decides, and the verdict says so.

Results under another tool's key (``workflow.output[<other>]``) never decide the primary's outcome.
Each item is judged by its boolean ``success`` (or ``ok``); an item without one counts as not
succeeded, marked ``unknown``. An outer failure (``ok: false``, ``isError``) never erases an item's
terminal success: with at least one item succeeded the verdict is PARTIAL_SUCCESS, with
``original_ok: false`` and the outer error kept as ``secondary_error``. The input is never mutated.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class VerdictStatus(StrEnum):
    SUCCESS = "SUCCESS"
    PARTIAL_SUCCESS = "PARTIAL_SUCCESS"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One item's terminal outcome as the tool reported it."""

    index: int
    success: bool | None
    """None when the item carried no boolean ``success``/``ok`` (counted as not succeeded)."""
    name: str | None = None
    id: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.name is not None:
            out["name"] = self.name
        if self.id is not None:
            out["id"] = self.id
        out["success"] = self.success
        if self.success is None:
            out["outcome"] = "unknown"
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class OperationVerdict:
    """The verdict on one execution, with per-item evidence."""

    status: VerdictStatus
    primary_tool: str
    items: tuple[ItemResult, ...] = ()
    source: str = "results"
    """Where the items came from: ``workflow.output.<tool>.results``, ``results`` or ``outer``."""
    original_ok: bool | None = None
    """The outer ``ok``/``success`` flag as sent (False when an item-level success outranked it)."""
    secondary_error: Any = None
    """The outer error kept for audit when items succeeded despite it."""
    error: Any = None
    """The outer error when it alone decided a FAILED verdict (no ``results[]``)."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def succeeded(self) -> int:
        return sum(1 for i in self.items if i.success is True)

    @property
    def failed(self) -> int:
        return len(self.items) - self.succeeded

    def multi_item(self) -> dict[str, Any]:
        """The summary metadata: ``{status, items_count, items_succeeded_count, …, primary_tool}``."""
        return {
            "status": self.status.value,
            "items_count": len(self.items),
            "items_succeeded_count": self.succeeded,
            "items_failed_count": self.failed,
            "primary_tool": self.primary_tool,
        }

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status.value,
            "source": self.source,
            "multi_item": self.multi_item(),
            "items": [i.to_dict() for i in self.items],
        }
        if self.original_ok is not None:
            out["original_ok"] = self.original_ok
        if self.secondary_error is not None:
            out["secondary_error"] = copy.deepcopy(self.secondary_error)
        if self.error is not None:
            out["error"] = copy.deepcopy(self.error)
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def classify_results(result: Any, primary_tool: str, *, is_error: bool = False) -> OperationVerdict:
    """The verdict on ``result`` (the primary tool's structured output); ``is_error`` is MCP's isError."""
    notes: list[str] = []
    raw_items, source = _find_items(result, primary_tool, notes)
    outer_ok = _outer_ok(result, is_error)
    outer_error = _outer_error(result) if outer_ok is False else None
    if not raw_items:
        what = "results[] is empty" if raw_items is not None else f"no results[] for {primary_tool}"
        notes.append(f"{what}: decided from the outer ok/isError")
        status = VerdictStatus.FAILED if outer_ok is False else VerdictStatus.SUCCESS
        return OperationVerdict(
            status, primary_tool, source=source, original_ok=outer_ok, error=outer_error, notes=tuple(notes)
        )
    items = tuple(_item(i, raw) for i, raw in enumerate(raw_items))
    succeeded = sum(1 for item in items if item.success is True)
    if succeeded == len(items) and outer_ok is not False:
        status = VerdictStatus.SUCCESS
    elif succeeded == 0:
        status = VerdictStatus.FAILED
    else:
        status = VerdictStatus.PARTIAL_SUCCESS
    secondary = None
    if outer_ok is False and succeeded:
        secondary = outer_error if outer_error is not None else "outer ok: false"
        notes.append("the outer result failed after items had succeeded; their success is kept")
    error = outer_error if outer_ok is False and not succeeded else None
    return OperationVerdict(status, primary_tool, items, source, outer_ok, secondary, error, tuple(notes))


def _find_items(result: Any, primary_tool: str, notes: list[str]) -> tuple[list[Any] | None, str]:
    if not isinstance(result, dict):
        return None, "outer"
    output = _workflow_output(result)
    if output is not None:
        mine = output.get(primary_tool)
        if isinstance(mine, dict) and isinstance(mine.get("results"), list):
            return mine["results"], f"workflow.output.{primary_tool}.results"
        others = sorted(k for k, v in output.items() if k != primary_tool and isinstance(v, dict))
        if others:
            notes.append(f"ignored results under workflow.output of other tools: {', '.join(others)}")
    if isinstance(result.get("results"), list):
        return result["results"], "results"
    return None, "outer"


def _workflow_output(result: dict[str, Any]) -> dict[str, Any] | None:
    workflow = result.get("workflow")
    output = workflow.get("output") if isinstance(workflow, dict) else None
    return output if isinstance(output, dict) else None


def _outer_ok(result: Any, is_error: bool) -> bool | None:
    if is_error:
        return False
    if isinstance(result, dict):
        for key in ("ok", "success"):
            if isinstance(result.get(key), bool):
                return result[key]
        if result.get("isError") is True:
            return False
    return None


def _outer_error(result: Any) -> Any:
    if isinstance(result, dict):
        for key in ("error", "message", "detail"):
            if result.get(key) is not None:
                return copy.deepcopy(result[key])
        return None
    if isinstance(result, str) and result:
        return result[:500]
    return None


def _item(index: int, raw: Any) -> ItemResult:
    if not isinstance(raw, dict):
        return ItemResult(index, None, error="item is not an object")
    flag = raw.get("success")
    if not isinstance(flag, bool):
        flag = raw.get("ok")
    success = flag if isinstance(flag, bool) else None
    error = raw.get("error")
    if error is not None and not isinstance(error, str):
        error = _compact(error)
    if success is None and error is None:
        error = "no boolean success/ok in this item"
    return ItemResult(index, success, _scalar(raw.get("name")), _scalar(raw.get("id")), error)


def _scalar(value: Any) -> str | None:
    return None if value is None else str(value)


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("code", "message"):
            if isinstance(value.get(key), str):
                return value[key]
    return str(value)[:200]
