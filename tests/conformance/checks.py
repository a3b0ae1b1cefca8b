"""Reading the conformance suite's ``checks.json``: what counts as a passed scenario.

A scenario passes only with at least one SUCCESS check and no FAILURE or WARNING: the suite's own
summary ticks a scenario that produced no checks at all, which proves nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    status: str
    description: str


@dataclass
class ScenarioReport:
    scenario: str
    checks: list[Check] = field(default_factory=list)

    @classmethod
    def load(cls, scenario: str, path: Path) -> ScenarioReport:
        raw = json.loads(path.read_text(encoding="utf-8"))
        checks = [Check(str(c.get("id")), str(c.get("status")), str(c.get("description", ""))) for c in raw]
        return cls(scenario, checks)

    def counts(self) -> Counter[str]:
        return Counter(c.status for c in self.checks)

    def problems(self) -> list[str]:
        """Why the scenario does not pass (empty when it does)."""
        counts = self.counts()
        problems = [
            f"{c.status} {c.id}: {c.description}" for c in self.checks if c.status in ("FAILURE", "WARNING")
        ]
        if counts["SUCCESS"] == 0:
            problems.append("no SUCCESS check at all")
        return problems

    def summary(self) -> str:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.counts().items())) or "no checks"
        verdict = "passed" if not self.problems() else "FAILED"
        return f"{self.scenario}: {verdict} ({counts})"


REPORTS: list[ScenarioReport] = []
"""Every scenario run in this session, for the terminal summary."""
