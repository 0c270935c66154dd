"""The engine loop's planner and postprocess, driven step by step with a fake runner (no threads, no
model, no timing): what each step carries, admission, stopping, constraints, scores, failures.

The fake forward gives every row that wants logits a row whose argmax is a function of the
request's last token (``_next``), so each request's tokens are known in advance."""

from __future__ import annotations

import pytest
import torch

from agentctx.serving.engine.loop import EngineLoop
from agentctx.serving.engine.request import GenerationCancelled, Request, RequestKind
from agentctx.serving.engine.scheduler import RowKind, Scheduler
from agentctx.serving.runner.batch_forward import StepOutput
from agentctx.serving.runner.paged_kv import QueryTail
from agentctx.serving.types import SamplingParams

V = 64
STOP = 63


def _next(tok: int) -> int:
    return (tok * 7 + 3) % 60  # never the stop token


class FakeRunner:
    """Records each step's rows; ``fail_on``: a token whose row makes the forward raise."""

    def __init__(self, fail_on: int | None = None, script: dict[int, int] | None = None):
        self.steps: list[list[tuple[int, int, str]]] = []  # (request tail id, tokens, want)
        self.fail_on, self.script = fail_on, script or {}

    def __call__(self, rows) -> StepOutput:
        if self.fail_on is not None and any(self.fail_on in r.token_ids for r in rows):
            raise IndexError("token out of range")
        self.steps.append([(id(r.tail), len(r.token_ids), r.want) for r in rows])
        last, index, all_rows = [], [-1] * len(rows), {}
        for i, r in enumerate(rows):
            if r.want == "none":
                continue
            if r.want == "all":
                all_rows[i] = torch.log_softmax(torch.arange(V, dtype=torch.float32), 0).repeat(len(r.token_ids), 1)
                continue
            row = torch.zeros(V)
            row[self.script.get(r.token_ids[-1], _next(r.token_ids[-1]))] = 5.0
            if r.logit_ids is not None:
                keep = torch.full((V,), float("-inf"))
                keep[r.logit_ids] = row[r.logit_ids]
                row = keep
            index[i] = len(last)
            last.append(row)
        return StepOutput(torch.stack(last) if last else None, index, all_rows)


def _loop(runner=None, **kw) -> tuple[EngineLoop, FakeRunner]:
    runner = runner or FakeRunner()
    kw.setdefault("max_rows", 8)
    return EngineLoop(runner, Scheduler(**kw), thread=False), runner


def _req(prompt, max_new=4, **kw) -> Request:
    return Request(None, QueryTail(0), list(prompt), pages=(0,), max_new_tokens=max_new,
                   stop_ids=frozenset({STOP}), **kw)


def _events(req: Request):
    out = []
    while not req.stream._q.empty():
        out.append(req.stream._q.get())
    return out


def _run(loop: EngineLoop, limit: int = 100) -> int:
    n = 0
    while loop.step():
        n += 1
        assert n < limit
    return n


def test_prompts_then_decode_rows_shortest_prompt_first_within_the_budget():
    loop, runner = _loop(step_tokens=64, step_tokens_decoding=16)
    long, mid, short = _req(range(1, 101)), _req(range(1, 11)), _req(range(1, 6))
    for r in (long, mid, short):
        loop.submit(r)
    loop.step()
    # Step 1: the two short prompts whole (shortest first); no chunk of the long one beside their
    # first tokens.
    assert runner.steps[0] == [(id(short.tail), 5, "greedy"), (id(mid.tail), 10, "greedy")]
    loop.step()
    # Step 2: two decode rows, then a chunk of the long prompt that is at most
    # step_tokens_decoding (it shares a step with others' next tokens).
    assert runner.steps[1] == [(id(mid.tail), 1, "greedy"), (id(short.tail), 1, "greedy"),
                               (id(long.tail), 16, "none")]
    _run(loop)
    for r in (long, mid, short):
        want = [_next(r.prompt_ids[-1])]
        while len(want) < 4:
            want.append(_next(want[-1]))
        assert r.output_ids == want and r.finish_reason == "length"
        evs = _events(r)
        assert [e.token_ids for e in evs[:-1]] == [(t,) for t in want] and evs[-1].finish_reason == "length"
    assert loop.stats.host_syncs == loop.stats.steps - sum(1 for s in runner.steps if all(w == "none" for *_, w in s))
    # A long prompt alone takes the whole budget.
    alone, runner = _loop(step_tokens=64, step_tokens_decoding=16)
    alone.submit(_req(range(1, 101)))
    alone.step()
    assert runner.steps[0][0][1] == 64


def test_admission_by_rows_and_by_kv_bytes_keeps_arrival_order():
    loop, runner = _loop(max_rows=2)
    reqs = [_req([i + 1], max_new=3) for i in range(5)]
    for r in reqs:
        loop.submit(r)
    loop.step()
    assert len(runner.steps[0]) == 2 and loop.scheduler.counts() == {"running": 2, "waiting": 3}
    _run(loop)
    assert max(len(s) for s in runner.steps) == 2 and all(r.finish_reason == "length" for r in reqs)
    # The first two ran first, the last one last.
    order = [next(i for i, s in enumerate(runner.steps) if any(t == id(r.tail) for t, *_ in s)) for r in reqs]
    assert order == sorted(order)
    # A byte bound below two requests' reads: one at a time; a request over it alone still runs.
    loop, runner = _loop(max_rows=8, max_step_kv_bytes=100)
    big = [_req([i + 1], max_new=2, kv_bytes=80) for i in range(3)]
    for r in big:
        loop.submit(r)
    _run(loop)
    assert max(len(s) for s in runner.steps) == 1 and all(r.finish_reason == "length" for r in big)


def test_stop_tokens_min_tokens_and_ignore_eos():
    script = {5: STOP, STOP: 7}  # after token 5 the model wants to stop
    loop, _ = _loop(FakeRunner(script=script))
    plain = _req([5], max_new=6)
    late = _req([5], max_new=6, min_tokens=2)
    through = _req([5], max_new=3, ignore_eos=True)
    for r in (plain, late, through):
        loop.submit(r)
    _run(loop)
    assert plain.output_ids == [] and plain.finish_reason == "stop"
    # min_tokens: the stop id is banned for the first 2 tokens, so the runner-up (token 0) comes.
    assert late.output_ids[:2] == [0, 3] and late.finish_reason in ("stop", "length")
    assert through.output_ids == [STOP, 7, _next(7)] and through.finish_reason == "length"


def test_zero_new_tokens_and_a_constraint_that_allows_nothing_finish_without_sampling():
    class Nothing:
        def allowed_ids(self):
            return []

        def advance(self, token):
            return True

    loop, runner = _loop()
    none, refused = _req([1, 2], max_new=0), _req([3], max_new=5, constraint=Nothing())
    loop.submit(none)
    loop.submit(refused)
    _run(loop)
    assert none.finish_reason == "length" and none.output_ids == []
    assert refused.finish_reason == "stop" and refused.output_ids == []
    assert loop.stats.host_syncs == 0


def test_a_constraint_limits_and_ends_the_quote():
    class Quote:
        """Allows 10, then 11, then ends (advance refuses anything after 11)."""

        def __init__(self):
            self.seen = []

        def allowed_ids(self):
            return [10] if not self.seen else [11]

        def advance(self, token):
            self.seen.append(token)
            return len(self.seen) <= 2

    loop, runner = _loop()
    q = _req([1], max_new=8, constraint=Quote())
    loop.submit(q)
    _run(loop)
    assert q.output_ids == [10, 11] and q.finish_reason == "stop"
    assert all(w == "last" for s in runner.steps for *_, w in s)  # constrained rows read their ids only


def test_abort_cancels_or_stops_and_others_go_on():
    loop, _ = _loop()
    a, b, c = _req([1], max_new=10), _req([2], max_new=10), _req([3], max_new=3)
    for r in (a, b, c):
        loop.submit(r)
    loop.step()
    loop.abort(a)
    loop.abort(b, "stop")  # a stop string the caller found
    _run(loop)
    assert isinstance(a.error, GenerationCancelled) and len(a.output_ids) == 1
    assert b.finish_reason == "stop" and b.error is None and len(b.output_ids) == 1
    assert c.finish_reason == "length" and len(c.output_ids) == 3
    assert loop.scheduler.stats.cancelled == 1 and loop.scheduler.counts() == {"running": 0, "waiting": 0}


def test_a_failing_row_fails_alone():
    loop, runner = _loop(FakeRunner(fail_on=99))
    good, bad, other = _req([1, 2], max_new=3), _req([99]), _req([4], max_new=3)
    for r in (good, bad, other):
        loop.submit(r)
    _run(loop)
    assert isinstance(bad.error, IndexError) and bad.output_ids == []
    assert good.finish_reason == other.finish_reason == "length"
    assert good.output_ids == [_next(2), _next(_next(2)), _next(_next(_next(2)))]
    assert loop.stats.fallbacks == 1 and loop.stats.failed_rows == 1


def test_score_runs_its_options_on_forks_in_one_step():
    loop, runner = _loop()
    s = Request(None, QueryTail(0), [1, 2, 3], pages=(0,), kind=RequestKind.SCORE, options=[[5], [6, 7], [8, 9, 10]])
    loop.submit(s)
    _run(loop)
    # Step 1: the prompt wanting its last logits; step 2: the two longer options, on two forks.
    assert [w for *_, w in runner.steps[0]] == ["last"] and len(runner.steps) == 2
    assert [(n, w) for _, n, w in runner.steps[1]] == [(1, "all"), (2, "all")]
    assert len({t for t, *_ in runner.steps[1]}) == 2 and id(s.tail) not in {t for t, *_ in runner.steps[1]}
    first = torch.log_softmax(torch.eye(V)[_next(3)] * 5.0, 0)
    later = torch.log_softmax(torch.arange(V, dtype=torch.float32), 0)
    want = [first[5], first[6] + later[7], first[8] + later[9] + later[10]]
    assert s.scores == pytest.approx([float(w) for w in want], abs=1e-5)
    assert _events(s)[-1].scores == tuple(s.scores)


def test_seeded_rows_are_reproducible_whatever_shares_their_steps():
    def tokens(with_others: bool) -> list[int]:
        loop, _ = _loop()
        g = torch.Generator().manual_seed(7)
        r = _req([1], max_new=6, temperature=1.0, generator=g)
        loop.submit(r)
        if with_others:
            for i in range(3):
                loop.submit(_req([i + 2], max_new=6, temperature=1.0))
        _run(loop)
        return r.output_ids

    assert tokens(False) == tokens(True)


def test_sampling_parameters_reach_the_sampler():
    # top_k=1 at temperature 1 is greedy; a huge presence penalty never repeats a token.
    loop, _ = _loop(FakeRunner(script={t: 9 for t in range(V)}))
    topk = _req([1], max_new=3, temperature=1.0, sampling=SamplingParams(top_k=1))
    pres = _req([1], max_new=3, sampling=SamplingParams(presence_penalty=100.0))
    for r in (topk, pres):
        loop.submit(r)
    _run(loop)
    assert topk.output_ids == [9, 9, 9]
    assert pres.output_ids[0] == 9 and len(set(pres.output_ids)) == 3


def test_the_chunk_follows_the_measured_costs():
    s = Scheduler(step_tokens=256, step_tokens_decoding=64, decode_slowdown=0.5, min_chunk=4)
    assert s.decoding_tokens() == 64  # nothing measured yet: the static bound

    def plan(n_decode, n_prompt):
        from agentctx.serving.engine.scheduler import ScheduledRow, StepPlan

        r = _req([1] * max(n_prompt, 1))
        rows = [ScheduledRow(_req([1], max_new=2), RowKind.DECODE, [1]) for _ in range(n_decode)]
        if n_prompt:
            rows.append(ScheduledRow(r, RowKind.PROMPT, [1] * n_prompt))
        return StepPlan(rows)

    s.observe(plan(3, 0), 0.050)  # a decode-only step: 50 ms
    s.observe(plan(3, 10), 0.080)  # 10 prompt tokens added 30 ms
    assert s.decoding_tokens() == int(0.5 * 0.050 / 0.003)  # 8 tokens keep a step within 1.5x
    for _ in range(30):  # GPU-like: prompt tokens nearly free, the static bound rules
        s.observe(plan(3, 10), 0.0501)
    assert s.decoding_tokens() == 64
    for _ in range(30):  # a slow CPU: a token costs more than the whole slack, min_chunk rules
        s.observe(plan(3, 4), 0.3)
    assert s.decoding_tokens() == 4
    t = Scheduler(step_tokens_decoding=64)  # a prompt step alone: an upper estimate; small ones say nothing
    t.observe(plan(0, 8), 1.0)
    assert t.prompt_token_s is None
    t.observe(plan(0, 100), 0.2)
    assert t.prompt_token_s == pytest.approx(0.002)


def test_bad_settings_and_bad_requests_are_refused():
    for kw, msg in (({"max_rows": 0}, "max_rows"), ({"step_tokens": 0}, "step_tokens"),
                    ({"max_step_kv_bytes": 0}, "max_step_kv_bytes"), ({"decode_slowdown": 0}, "decode_slowdown"),
                    ({"min_chunk": 0}, "min_chunk")):
        with pytest.raises(ValueError, match=msg):
            Scheduler(**kw)
    with pytest.raises(ValueError, match="prompt token"):
        _req([])
    with pytest.raises(ValueError, match="option"):
        Request(None, QueryTail(0), [1], kind=RequestKind.SCORE, options=[])
