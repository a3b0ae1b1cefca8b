"""What a detector reports about one tool result."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_SCANNED = 200_000
"""Characters of a result the detectors read (a longer one is scanned up to here)."""


@dataclass(frozen=True, slots=True)
class Finding:
    detector: str
    """``heuristic``, ``secrets``, ``pii`` or ``classifier``."""
    kind: str
    """What matched, from the detector's fixed vocabulary (a metric label)."""
    excerpt: str
    """What the run log shows (at most 80 characters): the matched text for an injection, the kind
    and length for a secret or personal data, never their value."""
    value: str = field(default="", repr=False, compare=False)
    """The text that ``redact`` cuts; never recorded or logged."""
