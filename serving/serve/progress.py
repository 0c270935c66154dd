"""Long model calls (a document's prefill, a context's restore) as streams of progress.

A 128K-token prefill takes ~17 minutes on a 2-core CPU box and seconds on a GPU: no fixed deadline
suits both, and a caller that gives up while the replica keeps going reports a failure for a load
that later succeeds. So the replica streams a :class:`Progress` after every prefill chunk and the
result last (:func:`aevents`, run there), and the caller (:func:`follow`, run here) fails the
call only when no event came for ``stall_s`` seconds: a deadline on a call that stopped
progressing, never on one that is merely slow.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Progress", "ProgressCallback", "StalledError", "aevents", "chunk_reporter", "follow"]


@dataclass(frozen=True)
class Progress:
    """Tokens of a document's prefill done so far, out of its total."""

    done: int
    total: int
    elapsed_s: float
    # The first report: tokens already done (a prefill resumed from its checkpoint) and when. The
    # rate counts only what this call computed since, so a resumed prefill's ETA is not too short.
    start: int = 0
    start_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        dt = self.elapsed_s - self.start_s
        return (self.done - self.start) / dt if dt > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.tokens_per_s
        return (self.total - self.done) / rate if rate > 0 else None

    def as_dict(self) -> dict:
        eta = self.eta_s
        return {"tokens_done": self.done, "tokens_total": self.total, "elapsed_s": round(self.elapsed_s, 2),
                "tokens_per_s": round(self.tokens_per_s, 1), "eta_s": None if eta is None else round(eta, 1)}


ProgressCallback = Callable[[Progress], None]


def chunk_reporter(on_progress: ProgressCallback) -> Callable[[int, int], None]:
    """The ``on_chunk(done, total)`` an engine calls, turned into timed :class:`Progress` reports
    (elapsed from now). The engine reports where it starts before its first chunk (0, or a
    checkpoint's tokens): rates count from that first report."""
    t0 = time.monotonic()
    first: list[tuple[int, float]] = []

    def report(done: int, total: int) -> None:
        elapsed = time.monotonic() - t0
        if not first:
            first.append((done, elapsed))
        on_progress(Progress(done, total, elapsed, *first[0]))

    return report


class StalledError(TimeoutError):
    """A long model call sent no progress for its stall deadline."""


async def aevents(run: Callable[[Callable[[int, int], None]], Any]) -> AsyncIterator[Any]:
    """Run ``run(on_chunk)`` in a worker thread and yield a :class:`Progress` per
    ``on_chunk(done, total)``, then its result (its exception is raised here). A worker thread
    cannot be stopped, so the work may go on after the consumer went away; whether a cancelled
    prefill still publishes its pages is not tested yet."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    on_chunk = chunk_reporter(lambda p: loop.call_soon_threadsafe(events.put_nowait, p))
    # Both the progress events and the thread's completion reach the loop through
    # call_soon_threadsafe, so every Progress is queued before the end.
    work = asyncio.ensure_future(asyncio.to_thread(run, on_chunk))
    work.add_done_callback(lambda _: events.put_nowait(_END))
    while (item := await events.get()) is not _END:
        yield item
    yield work.result()


_END = object()


def follow(stream, stall_s: float, on_progress: ProgressCallback | None, what: str) -> Any:
    """Consume a stream of :func:`aevents` (a Serve response generator) and return its result.

    Raises :class:`StalledError` when ``stall_s`` passes with no event; the stream is then
    cancelled (see :func:`aevents` for the replica's side)."""
    events: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:  # a sync Serve generator has no per-item timeout: read it in a thread
        try:
            for item in stream:
                events.put(("item", item))
            events.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            events.put(("error", exc))

    threading.Thread(target=read, name="model-call-follow", daemon=True).start()
    last: Progress | None = None
    result = None
    while True:
        try:
            kind, value = events.get(timeout=stall_s)
        except queue.Empty:
            cancel = getattr(stream, "cancel", None)
            if cancel is not None:
                cancel()
            done = f" ({last.done} of {last.total} tokens done)" if last is not None else ""
            raise StalledError(f"{what}: no progress for {stall_s:g} s{done}; raise serve.stall_timeout_s "
                               "(--stall-timeout) if the model is merely slow") from None
        if kind == "error":
            raise value
        if kind == "end":
            return result
        if isinstance(value, Progress):
            last = value
            if on_progress is not None:
                on_progress(value)
        else:
            result = value
