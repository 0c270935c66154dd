"""How big a chunk of a long prompt a scheduler step takes beside running generations
(serving/scheduler.py ``decoding_tokens``): sized from measured step costs so that a step stays
within ``1 + decode_slowdown`` times a decode-only step, between ``min_chunk`` and
``step_tokens_decoding``."""

from __future__ import annotations

import threading
import time

import pytest

from agentctx.serving.batch_forward import Row
from agentctx.serving.scheduler import Scheduler


def _decoding(s: Scheduler, tokens: int) -> threading.Thread:
    """A thread that decodes ``tokens`` one-token rows through ``s``; returned once it decodes."""
    started = threading.Event()

    def decoder():
        with s.open() as seq:
            for i in range(tokens):
                seq.run(Row(None, object(), [i]))
                started.set()

    t = threading.Thread(target=decoder)
    t.start()
    assert started.wait(10)
    return t


def test_the_chunk_follows_the_measured_costs():
    s = Scheduler(lambda rows: rows, step_tokens=256, step_tokens_decoding=64, decode_slowdown=0.5, min_chunk=4)
    assert s.decoding_tokens() == 64  # nothing measured yet: the static bound
    s._measure(n_decode=3, n_prompt=0, seconds=0.050)  # a decode-only step: 50 ms
    s._measure(n_decode=3, n_prompt=10, seconds=0.080)  # 10 prompt tokens added 30 ms
    assert s.decoding_tokens() == int(0.5 * 0.050 / 0.003)  # 8 tokens keep a step within 1.5x
    for _ in range(30):  # GPU-like: prompt tokens nearly free, the static bound rules
        s._measure(n_decode=3, n_prompt=10, seconds=0.0501)
    assert s.decoding_tokens() == 64
    for _ in range(30):  # a slow CPU: a token costs more than the whole slack, min_chunk rules
        s._measure(n_decode=3, n_prompt=4, seconds=0.3)
    assert s.decoding_tokens() == 4
    # A prompt step alone gives an upper estimate per token; small ones say nothing.
    t = Scheduler(lambda rows: rows, step_tokens_decoding=64)
    t._measure(n_decode=0, n_prompt=8, seconds=1.0)
    assert t._prompt_token_s is None
    t._measure(n_decode=0, n_prompt=100, seconds=0.2)
    assert t._prompt_token_s == pytest.approx(0.002)
    fixed = Scheduler(lambda rows: rows, step_tokens_decoding=48, decode_slowdown=None)
    fixed._measure(1, 0, 0.05)
    fixed._measure(1, 10, 0.5)
    assert fixed.decoding_tokens() == 48
    for kw, msg in (({"decode_slowdown": 0}, "decode_slowdown"), ({"min_chunk": 0}, "min_chunk")):
        with pytest.raises(ValueError, match=msg):
            Scheduler(lambda rows: rows, **kw)


def test_a_long_prompt_beside_a_decoding_request_takes_measured_chunks():
    """Real threads, a forward that costs 40 ms + 4 ms per prompt token: beside the decoding
    request the long prompt's chunks shrink to about 0.5 * 40 / 4 = 5 tokens, and it still
    finishes; alone it took step_tokens."""

    def run_rows(rows):
        prompt = sum(len(r.token_ids) for r in rows if len(r.token_ids) > 1)
        time.sleep(0.040 + 0.004 * prompt)
        return [None] * len(rows)

    s = Scheduler(run_rows, step_tokens=64, step_tokens_decoding=32, decode_slowdown=0.5, min_chunk=2,
                  gather_s=0.01)
    plans: list[list[tuple[int, int]]] = []
    s.on_step = plans.append

    def long_prompt():
        with s.open() as seq:
            seq.run(Row(None, object(), list(range(400)), want="none"))

    t1 = _decoding(s, 60)
    t2 = threading.Thread(target=long_prompt)
    t2.start()
    t2.join(60)
    t1.join(60)
    assert not t2.is_alive() and not t1.is_alive()
    long_chunks = [n for plan in plans for _, n in plan if n > 1]
    assert sum(long_chunks) == 400
    beside = [n for plan in plans if len(plan) == 2 for _, n in plan if n > 1]
    assert beside and max(beside) <= 32
    assert 2 <= beside[-1] <= 10  # measured: ~5
    assert s.describe()["decoding_chunk"] == s.decoding_tokens()


def test_jobs_and_steps_share_the_time_while_requests_run():
    """A prefill's jobs (0.1 s each) beside a decoding request (10 ms steps): between two jobs the
    steps get about as long as a job took (~10 steps), instead of one step per job."""

    def run_rows(rows):
        time.sleep(0.010)
        return [None] * len(rows)

    s = Scheduler(run_rows, gather_s=0.005)
    jobs_at_step: list[int] = []
    s.on_step = lambda plan: jobs_at_step.append(s.stats.jobs)
    t = _decoding(s, 200)
    for _ in range(4):
        s.call(lambda: time.sleep(0.1))
    t.join(60)
    between = [jobs_at_step.count(j) for j in (1, 2, 3)]  # steps run after job j and before job j + 1
    assert all(n >= 4 for n in between), between  # ~10 each; one step per job before
