"""What a model replica is holding: requests waiting to start, requests running, and queue time.

A request *waits* from its arrival at the replica until its model work starts (a worker thread
free to run it), then *runs* until it ends. Queue time is the waiting part. The replica reports
the counts in ``info()`` (what ``/metrics`` exposes per replica).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LoadMeter"]


class LoadMeter:
    """Thread-safe counts of one replica's waiting and running requests, and their queue time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.started = 0
        self.queue_s = 0.0

    def arrive(self) -> float:
        """A request arrived; returns its arrival time, for ``running``."""
        with self._lock:
            self.waiting += 1
        return time.perf_counter()

    @contextmanager
    def running_since(self, arrived: float) -> Iterator[None]:
        """Its work starts now (queue time = now - ``arrived``) and ends with the block."""
        now = time.perf_counter()
        with self._lock:
            self.waiting -= 1
            self.running += 1
            self.started += 1
            self.queue_s += max(0.0, now - arrived)
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1

    def snapshot(self) -> dict:
        with self._lock:
            return {"requests_waiting": self.waiting, "requests_running": self.running,
                    "queue_seconds": round(self.queue_s, 6), "requests_started": self.started}
