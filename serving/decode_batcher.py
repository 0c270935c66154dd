"""Batch the decode steps of concurrent generations into one forward.

Agents over one replica generate at the same time (a pipeline runs several at once, Serve
runs each request in its own thread). Without batching their forwards take turns, and
each decode step reads all the weights again for one token. Here each generating thread
hands its next step to :meth:`DecodeBatcher.step` and blocks; one of the waiting threads
(the leader) runs every pending step in one ``run_batch`` call and hands the results
back. Per-request logic (sampling, stop strings, streaming, copy constraints) stays in
the request's own thread.

Gathering: a leader waits until every generation that is decoding has handed in its
step, or ``gather_s`` has passed, whichever is first. With one generation it never waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["DecodeBatcher", "BatchStats"]

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class BatchStats:
    """Counters a replica reports: forwards run and the steps they carried."""

    batches: int = 0
    steps: int = 0
    max_rows: int = 0
    fallbacks: int = 0  # batches that failed and were re-run one step at a time


@dataclass
class _Pending(Generic[Item]):
    item: Item
    done: bool = False
    result: object = None
    error: BaseException | None = None
    taken: bool = False


class DecodeBatcher(Generic[Item, Result]):
    """Leader/follower batching of single decode steps.

    run_batch(items) -> results runs one forward for all items (it takes the engine's
    forward lock itself). If it raises, each item is re-run alone so that one bad step
    fails only its own request; run_batch must therefore leave its inputs unchanged when
    it raises (ModelRunner.extend_batch does).
    """

    def __init__(self, run_batch: Callable[[list[Item]], list[Result]], max_batch: int = 8,
                 gather_s: float = 0.003):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if gather_s < 0:
            raise ValueError(f"gather_s must be >= 0, got {gather_s}")
        self._run = run_batch
        self.max_batch = max_batch
        self.gather_s = gather_s
        self._cv = threading.Condition()
        self._pending: list[_Pending] = []
        self._leading = False  # a leader is gathering or running a batch
        self._active = 0  # generations inside decoding()
        self.stats = BatchStats()

    @contextmanager
    def decoding(self) -> Iterator[None]:
        """Count the caller as a generation that will hand in steps (leaders wait for it)."""
        with self._cv:
            self._active += 1
        try:
            yield
        finally:
            with self._cv:
                self._active -= 1
                self._cv.notify_all()  # a leader may be waiting for this generation's step

    def step(self, item: Item) -> Result:
        """Run one decode step, batched with whatever other generations hand in meanwhile."""
        mine = _Pending(item)
        with self._cv:
            self._pending.append(mine)
            self._cv.notify_all()
            while not mine.done and (self._leading or mine.taken):
                self._cv.wait()
            if mine.done:
                return self._unwrap(mine)
            # Lead: gather the other decoding generations' steps, then run them all.
            self._leading = True
            deadline = time.monotonic() + self.gather_s
            while len(self._pending) < min(self._active, self.max_batch):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            batch = [mine] + [p for p in self._pending if p is not mine][: self.max_batch - 1]
            for p in batch:
                p.taken = True
            self._pending = [p for p in self._pending if not p.taken]
        try:
            self._execute(batch)
        finally:
            with self._cv:
                for p in batch:  # only if _execute itself was interrupted: never leave a follower waiting
                    if not p.done:
                        p.error, p.done = RuntimeError("the batched decode step was interrupted"), True
                self._leading = False
                self._cv.notify_all()
        return self._unwrap(mine)

    def _execute(self, batch: list[_Pending]) -> None:
        try:
            results = self._run([p.item for p in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} steps")
            outcomes = [(r, None) for r in results]
        except Exception as exc:  # noqa: BLE001 - retried one by one below
            if len(batch) == 1:
                outcomes = [(None, exc)]
            else:
                log.warning("a batched decode step of %d rows failed (%s: %s); re-running each alone",
                            len(batch), type(exc).__name__, exc)
                self.stats.fallbacks += 1
                outcomes = []
                for p in batch:
                    try:
                        outcomes.append((self._run([p.item])[0], None))
                    except Exception as one:  # noqa: BLE001 - goes to that step's caller
                        outcomes.append((None, one))
        with self._cv:
            self.stats.batches += 1
            self.stats.steps += len(batch)
            self.stats.max_rows = max(self.stats.max_rows, len(batch))
            for p, (result, error) in zip(batch, outcomes):
                p.result, p.error, p.done = result, error, True
            self._cv.notify_all()

    @staticmethod
    def _unwrap(p: _Pending):
        if p.error is not None:
            raise p.error
        return p.result
