"""One run's guard on tool output: each result is scanned by the detectors, acted on (flag, redact,
block, or require confirmation for the rest of the run), marks the run as tainted by its tool, and
reaches the model spotlighted (docs/security.md, "Untrusted tool output")."""

from __future__ import annotations

from dataclasses import dataclass, field

from hatchway.config.settings import GuardsSettings
from hatchway.engine.context import RunContext
from hatchway.engine.guards.heuristics import Finding, scan
from hatchway.engine.guards.spotlight import instruction, new_boundary, spotlight
from hatchway.engine.items import Message
from hatchway.engine.tools.payloads import error_body


@dataclass(slots=True)
class Inspected:
    """What the model reads of one result, and what the guard found in it."""

    output: str
    findings: list[Finding] = field(default_factory=list)
    action: str | None = None
    """What was done about the findings: ``flag``, ``redact``, ``block`` or ``confirm``."""

    def record(self) -> dict[str, object]:
        return {
            "action": self.action,
            "findings": [
                {"detector": f.detector, "kind": f.kind, "excerpt": f.excerpt} for f in self.findings
            ],
        }


class ToolOutputGuard:
    """Made for one run (its spotlight boundary is the run's)."""

    def __init__(self, settings: GuardsSettings) -> None:
        self.settings = settings
        self.boundary = new_boundary()

    def system_note(self) -> Message | None:
        """What the model is told of the markers, before the conversation."""
        return Message(role="system", content=instruction(self.boundary)) if self.settings.spotlight else None

    def inspect(self, source: str, output: str, ctx: RunContext) -> Inspected:
        """``output`` of the tool ``source`` as the model will read it."""
        root = ctx.run.root
        if self.settings.confirm_when_tainted:
            root.confirm_when_tainted = True
        if source not in root.tainted_by:  # each tool once: a run's many calls keep this small
            root.tainted_by.append(source)
        findings = scan(output) if self.settings.heuristic != "off" else []
        action = self.settings.heuristic if findings else None
        if action == "block":
            kinds = ", ".join(sorted({f.kind for f in findings}))
            message = (
                f"The gateway withheld this result of {source}: it reads as instructions to you "
                f"(prompt injection: {kinds}), not as data."
            )
            return Inspected(error_body("blocked_by_guard", message), findings, action)
        if action == "redact":
            for finding in findings:
                output = output.replace(finding.excerpt, "[removed by the gateway's guard]")
        if action == "confirm":
            root.confirm_always = True
        if self.settings.spotlight:
            output = spotlight(output, self.boundary, source)
        return Inspected(output, findings, action)
