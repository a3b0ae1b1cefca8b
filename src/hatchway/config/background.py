"""``background:`` in hatchway.yaml: how background responses run when ``redis_url`` is set."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from hatchway.config.loading import StrictModel


class BackgroundSettings(StrictModel):
    """The job queue of background responses (used only with ``redis_url``; otherwise in-process)."""

    serve_concurrency: Annotated[int, Field(ge=0, le=256)] = 4
    """Background responses each ``hatchway serve`` replica runs off the queue at once; 0 leaves
    them all to ``hatchway worker`` processes."""
    worker_concurrency: Annotated[int, Field(ge=1, le=1024)] = 16
    """Background responses one ``hatchway worker`` process runs at once."""
    heartbeat_seconds: Annotated[int, Field(ge=1)] = 30
    """A taken job whose worker stops touching it for this long is swept (retried or given up)."""
    sweep_seconds: Annotated[int, Field(ge=1)] = 10
    """How often workers look for such jobs."""
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    """How many workers may take one job before it is given up; a take that finds the database
    unreachable does not count (see docs/scale.md, "Dead workers")."""
    requeue_after_seconds: Annotated[int, Field(ge=1)] = 30
    """A ``queued`` response whose job is missing from Redis, or has ended, this long after it was
    queued (or last checked) is queued again: a Redis restart without its data or a database outage
    strands none. Also the longest a job taken during a database outage waits to go back on the
    queue (see docs/reliability.md, "Background responses and Redis")."""
    shutdown_grace_seconds: Annotated[int, Field(ge=0)] = 30
    """On SIGTERM a worker stops taking jobs and lets running ones finish for up to this long."""
