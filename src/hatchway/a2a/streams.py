"""The A2A streams an organisation holds open on this replica (``SendStreamingMessage``,
``SubscribeToTask``): each holds a follower of its task's run until the task ends or its client
goes, so each organisation holds at most ``a2a.max_streams_per_organisation`` at a time; one more is
refused before it starts anything (docs/a2a.md, "Tasks")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from a2a.utils.errors import InvalidRequestError


class StreamSlots:
    def __init__(self, per_organisation: int) -> None:
        self.per_organisation = per_organisation
        self._open: Counter[str] = Counter()

    @contextmanager
    def hold(self, org_id: str) -> Iterator[None]:
        """One stream of ``org_id`` for as long as the block runs; InvalidRequest past the limit."""
        if self._open[org_id] >= self.per_organisation:
            raise InvalidRequestError(
                message=f"this organisation already has {self.per_organisation} A2A streams open on "
                "this server (a2a.max_streams_per_organisation); close one, or poll with GetTask"
            )
        self._open[org_id] += 1
        try:
            yield
        finally:
            self._open[org_id] -= 1
            if not self._open[org_id]:
                del self._open[org_id]

    def open(self, org_id: str) -> int:
        return self._open[org_id]
