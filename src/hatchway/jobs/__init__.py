"""Background responses on a Redis job queue (SAQ): enqueue on any replica, run on any worker.

Used only when ``redis_url`` is set; without Redis a background response runs in-process on the
replica that accepted it (``engine/background.py``).
"""

from hatchway.jobs.queue import ResponseQueue
from hatchway.jobs.worker import ResponseWorker, RunQueued

__all__ = ["ResponseQueue", "ResponseWorker", "RunQueued"]
