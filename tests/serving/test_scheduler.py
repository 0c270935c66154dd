"""The replica's scheduler (serving/scheduler.py) with real threads and the real packed forward:
concurrent requests keep the tokens they get alone, share steps, fail and cancel alone, wait
when admission says so, and a short request is not held behind a long prompt."""

from __future__ import annotations

import threading

import pytest
import torch

from agentctx.serving.batch_forward import Row, run_rows
from agentctx.serving.engine import GenerationCancelled, LocalEngine
from agentctx.serving.model_loader import load_model
from agentctx.serving.scheduler import Scheduler
from agentctx.serving.types import GenerateRequest, ScoreRequest
from tests.factories import make_tiny_checkpoint

DOC_A = "The supplier shall deliver 40 crates of apples every Monday. " * 4
DOC_B = "Either party may terminate this agreement on ninety days written notice. " * 3


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return load_model(make_tiny_checkpoint("gemma3_text", tmp_path_factory.mktemp("g")), device="cpu")


def _engine(loaded, **kw):
    # A long gather window so that concurrent requests really share steps on a busy CI box.
    kw.setdefault("decode_gather_s", 0.2)
    e = LocalEngine(loaded, page_size=16, prefill_chunk_tokens=32, **kw)
    for cid, text in (("a", DOC_A), ("b", DOC_B)):
        e.prefill(cid, e.tokenize_document(text), progress=False)
    return e


@pytest.fixture(scope="module")
def alone(loaded):
    return _engine(loaded, decode_batch=1)


@pytest.fixture(scope="module")
def batched(loaded):
    return _engine(loaded, decode_batch=8)


def _concurrently(fn, args, barrier: bool = True):
    results, errors = [None] * len(args), [None] * len(args)
    start = threading.Barrier(len(args)) if barrier else None

    def run(i, a):
        if start is not None:
            start.wait()
        try:
            results[i] = fn(a)
        except Exception as exc:  # noqa: BLE001 - checked by the test
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results, errors


REQS = [GenerateRequest("a", "Question: who delivers?", max_new_tokens=10),
        GenerateRequest("a", "Q: what?", pages=(0, 2, 5), max_new_tokens=14),
        GenerateRequest("b", "Quote:", pages=(1, 3), max_new_tokens=12, constraint="copy"),
        GenerateRequest("b", "Summary of the notice period and what either party must do " * 2, max_new_tokens=6,
                        stop=("e",)),
        GenerateRequest("a", "Answer:", pages=(4,), max_new_tokens=9)]


def _same(g, w):
    return g.token_ids == w.token_ids and g.text == w.text and g.finish_reason == w.finish_reason


def test_concurrent_requests_keep_their_tokens_and_share_steps(alone, batched):
    """Two contexts, five plans, a copy-constrained quote, a stop string and a 120-token prompt
    (cut into chunks): every request's tokens equal the same request run alone."""
    want = [alone.generate(r) for r in REQS]
    s = batched.scheduler.stats
    before = s.steps, s.rows, s.decode_rows
    got, errors = _concurrently(batched.generate, REQS)
    assert errors == [None] * len(REQS)
    assert all(_same(g, w) for g, w in zip(got, want))
    steps, rows = s.steps - before[0], s.rows - before[1]
    # Every generated token but a generation's last is one decode row (a stop string may end early).
    assert s.decode_rows - before[2] <= sum(len(w.token_ids) for w in want)
    assert steps < rows and s.max_rows_seen >= 3  # steps carried several requests' rows
    info = batched.describe()
    assert info["scheduler"]["running"] == 0 and info["scheduler"]["waiting"] == 0
    assert info["decode_batching"]["forwards"] >= steps


def test_scores_and_generations_share_steps(alone, batched):
    sreq = ScoreRequest("b", " Risk:", (" low", " high", " medium risk"), pages=(0, 2))
    want_s, want_g = alone.score(sreq), alone.generate(REQS[0])
    got, errors = _concurrently(lambda r: batched.score(r) if isinstance(r, ScoreRequest) else batched.generate(r),
                                [sreq, REQS[0], sreq])
    assert errors == [None] * 3
    for g in (got[0], got[2]):
        assert g == pytest.approx(want_s, abs=1e-4)
    assert _same(got[1], want_g)


def test_a_failing_row_fails_alone(loaded, batched):
    """A row whose forward raises (a token past the vocabulary) makes the packed step fail; the
    step is re-run row by row, and only that request gets the error."""
    runner = batched.runner
    kv = batched._docs["a"]
    sched = Scheduler(lambda rows: run_rows(runner, rows), max_rows=4, gather_s=0.2)
    prompts = [[40, 41, 42], [50, 51], [60, 61, 62, 63]]

    def alone_tokens(p):
        tail = runner.new_tail(kv)
        out = [int(runner.extend(kv, tail, p).argmax())]
        for _ in range(4):
            out.append(int(runner.extend(kv, tail, [out[-1]]).argmax()))
        return out

    want = [alone_tokens(p) for p in prompts]

    def request(p):
        with sched.open() as seq:
            tail = runner.new_tail(kv)
            if p is None:
                return seq.run(Row(kv, tail, [runner.model.config.vocab_size + 7]))
            out = [int(seq.run(Row(kv, tail, p)).argmax())]
            for _ in range(4):
                out.append(int(seq.run(Row(kv, tail, [out[-1]])).argmax()))
            return out

    got, errors = _concurrently(request, [prompts[0], None, prompts[1], prompts[2]])
    assert isinstance(errors[1], IndexError) and [e for i, e in enumerate(errors) if i != 1] == [None] * 3
    assert [got[0], got[2], got[3]] == want
    assert sched.stats.fallbacks >= 1 and sched.stats.failed_rows == 1
    sched.shutdown()


def test_cancelled_generation_leaves_the_others_unchanged(alone, batched):
    want = [alone.generate(r) for r in REQS[:3]]
    cancel = threading.Event()
    victim = GenerateRequest("b", "Question: how long is the notice?", max_new_tokens=30)

    def run(i):
        if i == 3:  # cancelled after its first streamed text
            return batched.generate(victim, on_text=lambda _: cancel.set(), cancel=cancel)
        return batched.generate(REQS[i])

    got, errors = _concurrently(run, [0, 1, 2, 3])
    assert isinstance(errors[3], GenerationCancelled) and errors[:3] == [None] * 3
    assert all(_same(g, w) for g, w in zip(got, want))
    assert batched.scheduler.counts() == {"running": 0, "waiting": 0}


def test_a_stream_whose_consumer_stops_is_cancelled(batched):
    req = GenerateRequest("a", "Question: who delivers?", max_new_tokens=40)
    before = batched.scheduler.stats.decode_rows
    stream = batched.stream(req)
    next(stream)
    stream.close()  # the consumer goes away (Serve closes the generator on disconnect)
    done = threading.Event()
    threading.Thread(target=lambda: (batched.generate(GenerateRequest("a", "x", max_new_tokens=2)), done.set()),
                     daemon=True).start()
    assert done.wait(60)
    # The abandoned generation stopped well before its 40 tokens.
    assert batched.scheduler.stats.decode_rows - before < 30


def test_a_short_request_is_not_held_behind_a_long_prompt(loaded):
    """With a ~600-token prompt in flight (step_tokens 64), a short request sent after the long
    prompt's first step runs its prompt in the next step and finishes all of its tokens before
    the long prompt's last chunk has run."""
    e = _engine(loaded, decode_batch=8, step_tokens=64, step_tokens_decoding=32, decode_gather_s=0.0)
    steps: list[list[tuple[int, int]]] = []
    first_step = threading.Event()

    def record(plan):
        steps.append(plan)
        first_step.set()

    e.scheduler.on_step = record
    long_req = GenerateRequest("a", "Explain every obligation of the supplier in detail. " * 12, max_new_tokens=2)
    short = GenerateRequest("b", "Who may terminate?", max_new_tokens=6)
    n_long = len(e.tokenizer(long_req.prompt, add_special_tokens=False)["input_ids"])
    assert n_long > 500
    results = {}
    t_long = threading.Thread(target=lambda: results.setdefault("long", e.generate(long_req)))
    t_long.start()
    assert first_step.wait(60)
    results["short"] = e.generate(short)
    t_long.join(120)
    assert results["short"].token_ids == _engine(loaded, decode_batch=1).generate(short).token_ids
    long_id = steps[0][0][0]
    long_chunks = [i for i, plan in enumerate(steps) if any(s == long_id and n > 1 for s, n in plan)]
    short_steps = [i for i, plan in enumerate(steps) if any(s != long_id for s, _ in plan)]
    # The short request's prompt and decode steps all ran while the long prompt was still being cut.
    assert len(short_steps) == len(results["short"].token_ids)
    assert short_steps[-1] < long_chunks[-1]
    # While the short one decoded, the long prompt took the smaller per-step budget.
    assert all(n <= 32 for i in short_steps[1:] for s, n in steps[i] if s == long_id)
    assert results["long"].prompt_tokens == n_long


def test_admission_bounds_rows_and_kv_bytes(loaded, alone):
    want = [alone.generate(r) for r in REQS]
    two = _engine(loaded, decode_batch=2)
    seen = []
    two.scheduler.on_step = lambda plan: seen.append((len(plan), two.scheduler.counts()))
    got, errors = _concurrently(two.generate, REQS)
    assert errors == [None] * len(REQS) and all(_same(g, w) for g, w in zip(got, want))
    assert max(n for n, _ in seen) == 2
    assert any(c["waiting"] > 0 for _, c in seen) and all(c["running"] <= 2 for _, c in seen)
    # A byte bound below two requests' reads: one request at a time, whatever decode_batch says.
    tight = _engine(loaded, decode_batch=8, max_step_kv_bytes=1)
    got, errors = _concurrently(tight.generate, REQS[:3])
    assert errors == [None] * 3 and all(_same(g, w) for g, w in zip(got, want[:3]))
    assert tight.scheduler.stats.max_rows_seen == 1


def test_a_prefill_interleaves_with_running_generations(loaded):
    """A document prefill runs one chunk per scheduler job, so a running generation keeps
    stepping between the chunks instead of waiting for the whole prefill."""
    e = _engine(loaded, decode_batch=4, decode_gather_s=0.0)
    jobs_at_step: list[int] = []
    started = threading.Event()

    def record(plan):
        jobs_at_step.append(e.scheduler.stats.jobs)
        started.set()

    e.scheduler.on_step = record
    big = e.tokenize_document(DOC_B * 6)
    n_chunks = -(-len(big.token_ids) // 32)
    assert n_chunks >= 8
    gen = threading.Thread(target=lambda: e.generate(GenerateRequest("a", "Q:", max_new_tokens=60)))
    gen.start()
    assert started.wait(60)
    jobs0 = e.scheduler.stats.jobs
    e.prefill("big", big, progress=False)
    gen.join(120)
    assert e.scheduler.stats.jobs - jobs0 == n_chunks + 1  # one job per chunk, one to finish
    # Steps of the generation ran between prefill chunks.
    assert any(jobs0 < j < jobs0 + n_chunks for j in jobs_at_step)
    assert e.generate(GenerateRequest("big", "Q:", max_new_tokens=3)).token_ids


def test_scheduler_refuses_bad_settings():
    for kw, msg in (({"max_rows": 0}, "max_rows"), ({"gather_s": -1}, "gather_s"),
                    ({"step_tokens": 0}, "step_tokens"), ({"max_step_kv_bytes": 0}, "max_step_kv_bytes")):
        with pytest.raises(ValueError, match=msg):
            Scheduler(lambda rows: rows, **kw)


def test_real_threads_get_identical_logits_to_alone(batched):
    """The logits a request receives through a shared step equal its own forward (fp32, < 1e-4)."""
    runner, kv = batched.runner, batched._docs["b"]
    tail = runner.new_tail(kv)
    want = runner.extend(kv, tail, [70, 71, 72], (0, 1))
    with batched.scheduler.open() as seq:
        got = seq.run(Row(kv, runner.new_tail(kv), [70, 71, 72], (0, 1)))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.model
def test_real_gemma_concurrent_requests_equal_alone():
    """The real Gemma 3 270M (fp32 CPU), short inputs: two contexts, four plans, a prompt longer
    than the step budget; greedy tokens of every request equal the same request run alone."""
    real = load_model(None, device="cpu")
    engines = {}
    for name, rows in (("alone", 1), ("batched", 4)):
        e = engines[name] = LocalEngine(real, page_size=32, prefill_chunk_tokens=64, decode_batch=rows,
                                        decode_gather_s=0.5, step_tokens=32, step_tokens_decoding=16)
        e.prefill("a", e.tokenize_document(DOC_A * 2), progress=False)
        e.prefill("b", e.tokenize_document(DOC_B * 2), progress=False)
    reqs = [GenerateRequest("a", "\nQuestion: What does the supplier deliver?\nAnswer:", max_new_tokens=8),
            GenerateRequest("b", "\nQuestion: How much notice is needed?\nAnswer:", pages=(0, 2), max_new_tokens=8),
            GenerateRequest("a", "\nQuote:", pages=(1, 2), max_new_tokens=8, constraint="copy"),
            GenerateRequest("b", "\nSummarise the termination clause, the notice period and who may end the "
                                 "agreement, in one sentence.\nSummary:", max_new_tokens=8)]
    want = [engines["alone"].generate(r) for r in reqs]
    got, errors = _concurrently(engines["batched"].generate, reqs)
    assert errors == [None] * len(reqs)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert engines["batched"].scheduler.stats.max_rows_seen >= 2


# ---------------------------------------------------------------------------- the GPU path, eagerly on CPU

@pytest.fixture(scope="module")
def static(loaded):
    """query_mode="static": decode rows in batched static rows (serving/batch_slots.py), prompts
    through QuerySlots: the CUDA-graph path's forwards, run eagerly."""
    return _engine(loaded, decode_batch=8, query_mode="static")


def test_static_rows_keep_the_eager_tokens(alone, static):
    want = [alone.generate(r) for r in REQS]
    s = static.scheduler.stats
    before = s.steps, s.rows
    got, errors = _concurrently(static.generate, REQS)
    assert errors == [None] * len(REQS)
    assert all(_same(g, w) for g, w in zip(got, want))
    assert s.steps - before[0] < s.rows - before[1]
    # Both documents got batched decode rows, and every row was given back.
    for cid in ("a", "b"):
        slots = list(static._docs[cid].batch_slots.values())
        assert slots and not any(any(bs.live) for bs in slots)
    sreq = ScoreRequest("b", " Risk:", (" low", " high", " medium risk"), pages=(0, 2))
    assert static.score(sreq) == pytest.approx(alone.score(sreq), abs=1e-4)


def test_static_rows_logits_equal_the_eager_forward(loaded):
    """Decode rows of four queries over two documents in static batched rows against each
    query's eager forward (fp32, < 1e-4); for three steps one query sits out, so its row runs
    as a dummy, and it must continue intact."""
    eager = _engine(loaded, decode_batch=1)
    st = _engine(loaded, decode_batch=8, query_mode="static")
    plans = [("a", None), ("a", (0, 3)), ("b", (1,)), ("a", (2, 4, 5))]
    toks = [[40, 41, 42], [50, 51], [60, 61, 62, 63], [70]]
    tails = {e: [e.runner.new_tail(e._docs[c]) for c, _ in plans] for e in (eager, st)}

    def step(e, which):
        return run_rows(e.runner, [Row(e._docs[plans[i][0]], tails[e][i], toks[i], plans[i][1]) for i in which])

    for which in ([0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 3], [0, 2, 3], [0, 2, 3], [0, 1, 2, 3]):
        want, got = step(eager, which), step(st, which)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=0)
        for i, w in zip(which, want):
            toks[i] = [int(w.argmax())]
    assert all(t.batch is not None for t in tails[st])  # decoding in batched rows
    assert [t.length for t in tails[st]] == [t.length for t in tails[eager]]


def test_a_tail_that_outgrows_its_row_continues_eagerly(alone, loaded):
    st = _engine(loaded, decode_batch=4, query_mode="static")
    st.runner.batch_tail_tokens = 40  # REQS[3]'s 120-token prompt never fits; the others outgrow theirs
    long = [GenerateRequest("a", "Question: who delivers?", max_new_tokens=30), REQS[3], REQS[1]]
    want = [alone.generate(r) for r in long]
    got, errors = _concurrently(st.generate, long)
    assert errors == [None] * 3 and all(_same(g, w) for g, w in zip(got, want))
