"""Long model calls as streams of progress (serving/serve/progress.py): the replica side turns a
chunked prefill into events, the caller fails a call only when no event came for its deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentctx.serving.serve.progress import Progress, StalledError, aevents, follow


def _collect(agen) -> list:
    async def run():
        return [x async for x in agen]

    return asyncio.run(run())


def test_aevents_yields_each_chunk_then_the_result():
    def work(on_chunk):
        for done in (32, 64, 70):
            on_chunk(done, 70)
        return "result"

    items = _collect(aevents(work))
    assert [(p.done, p.total) for p in items[:-1]] == [(32, 70), (64, 70), (70, 70)]
    assert items[-1] == "result"
    assert all(isinstance(p, Progress) and p.elapsed_s >= 0 for p in items[:-1])


def test_aevents_raises_the_works_error_after_its_progress():
    def work(on_chunk):
        on_chunk(1, 2)
        raise ValueError("document is empty")

    seen = []

    async def run():
        async for x in aevents(work):
            seen.append(x)

    with pytest.raises(ValueError, match="document is empty"):
        asyncio.run(run())
    assert [p.done for p in seen] == [1]


def test_progress_rate_and_eta():
    p = Progress(done=250, total=1000, elapsed_s=5.0)
    assert p.tokens_per_s == 50.0 and p.eta_s == 15.0
    assert p.as_dict() == {"tokens_done": 250, "tokens_total": 1000, "elapsed_s": 5.0, "tokens_per_s": 50.0,
                           "eta_s": 15.0}
    assert Progress(0, 10, 0.0).eta_s is None


class _Stream:
    """A response stream like Serve's: iterable, cancellable."""

    def __init__(self, items, pause_s: float = 0.0, pause_after: int = 0):
        self.items, self.pause_s, self.pause_after = items, pause_s, pause_after
        self.cancelled = threading.Event()

    def __iter__(self):
        for i, item in enumerate(self.items):
            if i == self.pause_after and self.pause_s:
                self.cancelled.wait(self.pause_s)
                if self.cancelled.is_set():
                    return
            yield item

    def cancel(self):
        self.cancelled.set()


def test_follow_has_no_deadline_on_a_slow_call_that_progresses():
    # 10 events 0.05 s apart: 0.5 s in all, against a stall deadline of 0.2 s
    class Slow(_Stream):
        def __iter__(self):
            for item in self.items:
                time.sleep(0.05)
                yield item

    seen = []
    items = [Progress(i, 9, 0.1 * i) for i in range(1, 10)] + ["done"]
    assert follow(Slow(items), 0.2, seen.append, "prefill of ctx") == "done"
    assert [p.done for p in seen] == list(range(1, 10))


def test_follow_fails_a_call_that_stopped_progressing_and_cancels_it():
    stream = _Stream([Progress(64, 256, 1.0), Progress(128, 256, 2.0), "never"], pause_s=30, pause_after=2)
    t0 = time.monotonic()
    with pytest.raises(StalledError, match=r"prefill of ctx-1: no progress for 0.3 s \(128 of 256 tokens done\)"):
        follow(stream, 0.3, None, "prefill of ctx-1")
    assert time.monotonic() - t0 < 5 and stream.cancelled.is_set()


def test_follow_raises_the_streams_error():
    def bad():
        yield Progress(1, 2, 0.1)
        raise RuntimeError("replica died")

    with pytest.raises(RuntimeError, match="replica died"):
        follow(bad(), 5.0, None, "prefill")
