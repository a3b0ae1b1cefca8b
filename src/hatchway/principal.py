"""Who a request is from: the organisation and the API key behind it (foundation: imported by anyone)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Principal:
    """The organisation and key behind a request."""

    org_id: str
    org_name: str
    key_id: str | None = None
    key_name: str | None = None
